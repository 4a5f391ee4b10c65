# Corpus: asynchronous writes and the I/O attributes.
set $dir=/tmp
define fileset name=data,path=$dir,size=1m,entries=4,prealloc=100,reuse
define process name=p
{
  thread name=t
  {
    flowop aiowrite name=aw,filesetname=data,iosize=4k,random,workingset=512k,dsync,iters=4,opennext,directio
    flowop aiowait name=awt,value=4
    flowop read name=rd,filesetname=data,iosize=4k,random,indexed=2,fd=3
    flowop closefile name=c3,fd=3
  }
}
run 1
