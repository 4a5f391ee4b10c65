# seq-wr-32th-32f-1m: sequential writes to new files, 32 thread(s), 32 file(s), 1m I/O
# (FUSE performance paper, Table 5/6 row 28). Defaults are the paper's
# sizes; bench/workloads/scale/*.vars scales them down.
set $dir=/tmp
set $runtime=60
set $iosize=1m
set $nthreads=32
set $wrbytes32f=64g

define fileset name=wrset32f,path=$dir,size=0,entries=32,dirwidth=32,dirgamma=0,prealloc

define process name=seq-wr,instances=1
{
  thread name=seq-wrthread,memsize=$iosize,instances=$nthreads
  {
    flowop write name=seqwrite,filesetname=wrset32f,iosize=$iosize
    flowop finishonbytes name=finish,target=seqwrite,value=$wrbytes32f
  }
}

echo "seq-wr-32th-32f-1m: sequential writes to new files of $iosize, $nthreads thread(s), in $dir"
run $runtime
