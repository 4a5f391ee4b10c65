# rnd-rd-1th-1f-4k: random reads, 1 thread(s), 1 file(s), 4k I/O
# (FUSE performance paper, Table 5/6 row 13). Defaults are the paper's
# sizes; bench/workloads/scale/*.vars scales them down.
set $dir=/tmp
set $runtime=60
set $iosize=4k
set $nthreads=1
set $filesize1f=60g

define file name=keep-file1f,path=$dir,size=$filesize1f,prealloc,reuse

define process name=rnd-rd,instances=1
{
  thread name=rnd-rdthread,memsize=$iosize,instances=$nthreads
  {
    flowop read name=rndread,filename=keep-file1f,iosize=$iosize,random
  }
}

echo "rnd-rd-1th-1f-4k: random reads of $iosize, $nthreads thread(s), in $dir"
run $runtime
