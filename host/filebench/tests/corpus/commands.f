# Corpus: interpreter statements.
debug 1
enable lathist
enable multi
set $dir=/tmp
define fileset name=a,path=$dir,size=4k,entries=10,prealloc
define process name=p
{
  thread name=t
  {
    flowop statfile name=s,filesetname=a
  }
}
create files
create processes
stats clear
sleep 1
stats snap
shutdown processes
system "true"
psrun -1 1
quit
