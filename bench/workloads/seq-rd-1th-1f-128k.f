# seq-rd-1th-1f-128k: sequential reads, 1 thread(s), 1 file(s), 128k I/O
# (FUSE performance paper, Table 5/6 row 3). Defaults are the paper's
# sizes; bench/workloads/scale/*.vars scales them down.
set $dir=/tmp
set $runtime=60
set $iosize=128k
set $nthreads=1
set $filesize1f=60g

define file name=keep-file1f,path=$dir,size=$filesize1f,prealloc,reuse

define process name=seq-rd,instances=1
{
  thread name=seq-rdthread,memsize=$iosize,instances=$nthreads
  {
    flowop read name=seqread,filename=keep-file1f,iosize=$iosize
  }
}

echo "seq-rd-1th-1f-128k: sequential reads of $iosize, $nthreads thread(s), in $dir"
run $runtime
