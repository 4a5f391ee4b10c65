# Corpus: semaphores and block/wakeup between two processes.
set $dir=/tmp
define fileset name=a,path=$dir,size=4k,entries=10,prealloc
define process name=producer
{
  thread name=t
  {
    flowop statfile name=s1,filesetname=a
    flowop sempost name=post,value=1,target=wait,blocking,highwater=100
  }
}
define process name=consumer
{
  thread name=t
  {
    flowop semblock name=wait,value=1,highwater=100
    flowop statfile name=s2,filesetname=a
    flowop wakeup name=wake,target=blk
  }
  thread name=t2
  {
    flowop block name=blk
    flowop statfile name=s3,filesetname=a
  }
}
run 1
