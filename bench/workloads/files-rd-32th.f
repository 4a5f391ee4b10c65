# files-rd-32th: open, read whole and close 4 KiB files over 1,000 directories, 32 thread(s)
# (FUSE performance paper, Table 5/6 row 40). Defaults are the paper's
# sizes; bench/workloads/scale/*.vars scales them down.
set $dir=/tmp
set $runtime=60
set $nthreads=32
set $rdfiles=1000000
set $rddirwidth=1000

define fileset name=keep-rdset,path=$dir,size=4k,entries=$rdfiles,dirwidth=$rddirwidth,dirgamma=0,prealloc,reuse

define process name=fileread,instances=1
{
  thread name=filereadthread,memsize=4k,instances=$nthreads
  {
    flowop openfile name=openfile1,filesetname=keep-rdset,fd=1
    flowop readwholefile name=readfile1,fd=1,iosize=4k
    flowop closefile name=closefile1,fd=1
  }
}

echo "files-rd-32th: $nthreads thread(s) in $dir"
run $runtime
