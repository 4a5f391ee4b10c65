# Corpus: variables, filesets, files, the file and I/O flowops.
set $dir=/tmp
set $nfiles=20
set $label="basics \$dir=$dir"
set $sync=false
set $twice=$nfiles * 2 + (4 - 2)
define fileset name=set1,path=$dir,size=8k,entries=$nfiles,dirwidth=5,dirgamma=0,filesizegamma=0,prealloc=80,reuse,paralloc,
  cached=true
define fileset name=ro,path=$dir,size=4k,entries=4,prealloc,readonly,leafdirs=0
define file name=one,path=$dir,size=64k,prealloc
define process name=p,instances=1
{
  thread name=t,memsize=1m,instances=2,useism
  {
    flowop createfile name=create1,filesetname=set1,fd=1
    flowop writewholefile name=wwf,fd=1,srcfd=1,iosize=4k
    flowop appendfile name=app,fd=1,iosize=1k,dsync=$sync
    flowop appendfilerand name=appr,fd=1,iosize=2k
    flowop fsync name=sync1,fd=1
    flowop closefile name=close1,fd=1
    flowop openfile name=open2,filesetname=set1,fd=2
    flowop readwholefile name=rwf,fd=2,iosize=4k
    flowop closefile name=close2,fd=2
    flowop statfile name=stat1,filesetname=ro
    flowop read name=rd,filename=one,iosize=4k
    flowop write name=wr,filename=one,iosize=4k
    flowop fsyncset name=fss,filesetname=set1
    flowop deletefile name=del1,filesetname=set1
  }
}
echo "$label"
usage "usage: set \$dir=DIR"
vars
list
run 1
