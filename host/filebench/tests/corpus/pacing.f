# Corpus: the event generator, limits, delays, finish conditions, quit mode.
set $dir=/tmp
set mode quit alldone
eventgen rate=200
define fileset name=a,path=$dir,size=4k,entries=10,prealloc
define process name=p
{
  thread name=limited
  {
    flowop statfile name=st,filesetname=a
    flowop eventlimit name=el
    flowop iopslimit name=il
    flowop opslimit name=ol
    flowop bwlimit name=bl
    flowop finishoncount name=fc,value=50,target=st
  }
  thread name=bytes
  {
    flowop read name=r,filesetname=a,iosize=1k
    flowop delay name=d,value=0
    flowop hog name=h,value=10
    flowop finishonbytes name=fb,value=64k,target=r
  }
}
run 5
