# rnd-wr-32th-1f-4k: random writes, 32 thread(s), 1 file(s), 4k I/O
# (FUSE performance paper, Table 5/6 row 33). Defaults are the paper's
# sizes; bench/workloads/scale/*.vars scales them down.
set $dir=/tmp
set $runtime=60
set $iosize=4k
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

echo "rnd-wr-32th-1f-4k: random writes of $iosize, $nthreads thread(s), in $dir"
run $runtime
