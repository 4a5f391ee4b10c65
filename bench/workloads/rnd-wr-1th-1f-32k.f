# rnd-wr-1th-1f-32k: random writes, 1 thread(s), 1 file(s), 32k I/O
# (FUSE performance paper, Table 5/6 row 30). Defaults are the paper's
# sizes; bench/workloads/scale/*.vars scales them down.
set $dir=/tmp
set $runtime=60
set $iosize=32k
set $nthreads=1
set $filesize1f=60g

define file name=keep-file1f,path=$dir,size=$filesize1f,prealloc,reuse

define process name=rnd-wr,instances=1
{
  thread name=rnd-wrthread,memsize=$iosize,instances=$nthreads
  {
    flowop write name=rndwrite,filename=keep-file1f,iosize=$iosize,random
  }
}

echo "rnd-wr-1th-1f-32k: random writes of $iosize, $nthreads thread(s), in $dir"
run $runtime
