# mail-server: Filebench's varmail personality (16 threads, 16 KiB mean file size, one flat directory)
# (FUSE performance paper, Table 5/6 row 44). Defaults are the paper's
# sizes; bench/workloads/scale/*.vars scales them down.
set $dir=/tmp
set $runtime=60
set $nfiles=1500000
set $meandirwidth=1000000
set $meanfilesize=16k
set $nthreads=16
set $iosize=1m
set $meanappendsize=16k

define fileset name=mailset,path=$dir,size=cvar(type=cvar-gamma,parameters=mean:$meanfilesize;gamma:1.5),entries=$nfiles,dirwidth=$meandirwidth,prealloc=80,paralloc

define process name=mailserver,instances=1
{
  thread name=mailthread,memsize=10m,instances=$nthreads
  {
    flowop deletefile name=deletefile1,filesetname=mailset
    flowop createfile name=createfile2,filesetname=mailset,fd=1
    flowop appendfilerand name=appendfilerand2,iosize=$meanappendsize,fd=1
    flowop fsync name=fsyncfile2,fd=1
    flowop closefile name=closefile2,fd=1
    flowop openfile name=openfile3,filesetname=mailset,fd=1
    flowop readwholefile name=readfile3,fd=1,iosize=$iosize
    flowop appendfilerand name=appendfilerand3,iosize=$meanappendsize,fd=1
    flowop fsync name=fsyncfile3,fd=1
    flowop closefile name=closefile3,fd=1
    flowop openfile name=openfile4,filesetname=mailset,fd=1
    flowop readwholefile name=readfile4,fd=1,iosize=$iosize
    flowop closefile name=closefile4,fd=1
  }
}

echo "mail-server: $nthreads threads, $nfiles files of $meanfilesize mean in $dir"
run $runtime
