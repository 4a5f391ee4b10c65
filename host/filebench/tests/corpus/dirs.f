# Corpus: directory flowops on leaf directories.
set $dir=/tmp
define fileset name=tree,path=$dir,size=0,entries=100,dirwidth=5,leafdirs=40,prealloc=50
define process name=p
{
  thread name=t
  {
    flowop makedir name=mk,filesetname=tree
    flowop listdir name=ls,filesetname=tree
    flowop removedir name=rm,filesetname=tree
  }
}
run 1
