# web-server: Filebench's web-server personality (100 threads, 16 KiB mean file size, a shared log)
# (FUSE performance paper, Table 5/6 row 45). Defaults are the paper's
# sizes; bench/workloads/scale/*.vars scales them down.
set $dir=/tmp
set $runtime=60
set $nfiles=1250000
set $meandirwidth=20
set $meanfilesize=16k
set $nthreads=100
set $iosize=1m
set $meanappendsize=16k

define fileset name=webset,path=$dir,size=cvar(type=cvar-gamma,parameters=mean:$meanfilesize;gamma:1.5),entries=$nfiles,dirwidth=$meandirwidth,prealloc,paralloc
define fileset name=weblog,path=$dir,size=0,entries=1,dirwidth=1,prealloc

define process name=webserver,instances=1
{
  thread name=webthread,memsize=10m,instances=$nthreads
  {
    flowop openfile name=openfile1,filesetname=webset,fd=1
    flowop readwholefile name=readfile1,fd=1,iosize=$iosize
    flowop closefile name=closefile1,fd=1
    flowop openfile name=openfile2,filesetname=webset,fd=1
    flowop readwholefile name=readfile2,fd=1,iosize=$iosize
    flowop closefile name=closefile2,fd=1
    flowop openfile name=openfile3,filesetname=webset,fd=1
    flowop readwholefile name=readfile3,fd=1,iosize=$iosize
    flowop closefile name=closefile3,fd=1
    flowop openfile name=openfile4,filesetname=webset,fd=1
    flowop readwholefile name=readfile4,fd=1,iosize=$iosize
    flowop closefile name=closefile4,fd=1
    flowop openfile name=openfile5,filesetname=webset,fd=1
    flowop readwholefile name=readfile5,fd=1,iosize=$iosize
    flowop closefile name=closefile5,fd=1
    flowop openfile name=openfile6,filesetname=webset,fd=1
    flowop readwholefile name=readfile6,fd=1,iosize=$iosize
    flowop closefile name=closefile6,fd=1
    flowop openfile name=openfile7,filesetname=webset,fd=1
    flowop readwholefile name=readfile7,fd=1,iosize=$iosize
    flowop closefile name=closefile7,fd=1
    flowop openfile name=openfile8,filesetname=webset,fd=1
    flowop readwholefile name=readfile8,fd=1,iosize=$iosize
    flowop closefile name=closefile8,fd=1
    flowop openfile name=openfile9,filesetname=webset,fd=1
    flowop readwholefile name=readfile9,fd=1,iosize=$iosize
    flowop closefile name=closefile9,fd=1
    flowop openfile name=openfile10,filesetname=webset,fd=1
    flowop readwholefile name=readfile10,fd=1,iosize=$iosize
    flowop closefile name=closefile10,fd=1
    flowop openfile name=openlog,filesetname=weblog,fd=2
    flowop appendfile name=appendlog,iosize=$meanappendsize,fd=2
    flowop closefile name=closelog,fd=2
  }
}

echo "web-server: $nthreads threads, $nfiles files of $meanfilesize mean in $dir"
run $runtime
