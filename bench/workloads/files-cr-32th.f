# files-cr-32th: create 4 KiB files over 1,000 directories, 32 thread(s)
# (FUSE performance paper, Table 5/6 row 38). Defaults are the paper's
# sizes; bench/workloads/scale/*.vars scales them down.
set $dir=/tmp
set $runtime=60
set $nthreads=32
set $crfiles=4000000
set $crdirwidth=4000

define fileset name=crset,path=$dir,size=4k,entries=$crfiles,dirwidth=$crdirwidth,dirgamma=0

define process name=filecreate,instances=1
{
  thread name=filecreatethread,memsize=4k,instances=$nthreads
  {
    flowop createfile name=createfile1,filesetname=crset,fd=1
    flowop writewholefile name=writefile1,fd=1,iosize=4k
    flowop closefile name=closefile1,fd=1
  }
}

echo "files-cr-32th: $nthreads thread(s) in $dir"
run $runtime
