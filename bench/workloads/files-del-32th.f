# files-del-32th: delete preallocated 4 KiB files over 1,000 directories, 32 thread(s)
# (FUSE performance paper, Table 5/6 row 42). Defaults are the paper's
# sizes; bench/workloads/scale/*.vars scales them down.
set $dir=/tmp
set $runtime=60
set $nthreads=32
set $delfiles=4000000
set $deldirwidth=4000

define fileset name=delset,path=$dir,size=4k,entries=$delfiles,dirwidth=$deldirwidth,dirgamma=0,prealloc,paralloc

define process name=filedelete,instances=1
{
  thread name=filedeletethread,memsize=4k,instances=$nthreads
  {
    flowop deletefile name=deletefile1,filesetname=delset
  }
}

echo "files-del-32th: $nthreads thread(s) in $dir"
run $runtime
