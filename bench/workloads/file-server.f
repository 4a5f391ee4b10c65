# file-server: Filebench's file-server personality (50 threads, 128 KiB mean file size)
# (FUSE performance paper, Table 5/6 row 43). Defaults are the paper's
# sizes; bench/workloads/scale/*.vars scales them down.
set $dir=/tmp
set $runtime=60
set $nfiles=200000
set $meandirwidth=20
set $meanfilesize=128k
set $nthreads=50
set $iosize=1m
set $meanappendsize=16k

define fileset name=fsset,path=$dir,size=cvar(type=cvar-gamma,parameters=mean:$meanfilesize;gamma:1.5),entries=$nfiles,dirwidth=$meandirwidth,prealloc=80,paralloc

define process name=filereader,instances=1
{
  thread name=filereaderthread,memsize=10m,instances=$nthreads
  {
    flowop createfile name=createfile1,filesetname=fsset,fd=1
    flowop writewholefile name=wrtfile1,srcfd=1,fd=1,iosize=$iosize
    flowop closefile name=closefile1,fd=1
    flowop openfile name=openfile1,filesetname=fsset,fd=1
    flowop appendfilerand name=appendfilerand1,iosize=$meanappendsize,fd=1
    flowop closefile name=closefile2,fd=1
    flowop openfile name=openfile2,filesetname=fsset,fd=1
    flowop readwholefile name=readfile1,fd=1,iosize=$iosize
    flowop closefile name=closefile3,fd=1
    flowop deletefile name=deletefile1,filesetname=fsset
    flowop statfile name=statfile1,filesetname=fsset
  }
}

echo "file-server: $nthreads threads, $nfiles files of $meanfilesize mean in $dir"
run $runtime
