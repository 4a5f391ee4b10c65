# rnd-wr-32th-1f-128k: random writes, 32 thread(s), 1 file(s), 128k I/O
# (FUSE performance paper, Table 5/6 row 35). Defaults are the paper's
# sizes; bench/workloads/scale/*.vars scales them down.
set $dir=/tmp
set $runtime=60
set $iosize=128k
set $nthreads=32
set $filesize1f=60g

define file name=keep-file1f,path=$dir,size=$filesize1f,prealloc,reuse

define process name=rnd-wr,instances=1
{
  thread name=rnd-wrthread,memsize=$iosize,instances=$nthreads
  {
    flowop write name=rndwrite,filename=keep-file1f,iosize=$iosize,random
  }
}

echo "rnd-wr-32th-1f-128k: random writes of $iosize, $nthreads thread(s), in $dir"
run $runtime
