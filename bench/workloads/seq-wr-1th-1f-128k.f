# seq-wr-1th-1f-128k: sequential writes to new files, 1 thread(s), 1 file(s), 128k I/O
# (FUSE performance paper, Table 5/6 row 23). Defaults are the paper's
# sizes; bench/workloads/scale/*.vars scales them down.
set $dir=/tmp
set $runtime=60
set $iosize=128k
set $nthreads=1
set $wrbytes1f=60g

define file name=wrfile1f,path=$dir,size=0,prealloc

define process name=seq-wr,instances=1
{
  thread name=seq-wrthread,memsize=$iosize,instances=$nthreads
  {
    flowop write name=seqwrite,filename=wrfile1f,iosize=$iosize
    flowop finishonbytes name=finish,target=seqwrite,value=$wrbytes1f
  }
}

echo "seq-wr-1th-1f-128k: sequential writes to new files of $iosize, $nthreads thread(s), in $dir"
run $runtime
