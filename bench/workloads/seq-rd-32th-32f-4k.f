# seq-rd-32th-32f-4k: sequential reads, 32 thread(s), 32 file(s), 4k I/O
# (FUSE performance paper, Table 5/6 row 9). Defaults are the paper's
# sizes; bench/workloads/scale/*.vars scales them down.
set $dir=/tmp
set $runtime=60
set $iosize=4k
set $nthreads=32
set $filesize32f=2g

define fileset name=keep-set32f,path=$dir,size=$filesize32f,entries=32,dirwidth=32,dirgamma=0,prealloc,reuse

define process name=seq-rd,instances=1
{
  thread name=seq-rdthread,memsize=$iosize,instances=$nthreads
  {
    flowop read name=seqread,filesetname=keep-set32f,iosize=$iosize
  }
}

echo "seq-rd-32th-32f-4k: sequential reads of $iosize, $nthreads thread(s), in $dir"
run $runtime
