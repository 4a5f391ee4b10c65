#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Writes bench/workloads/*.f: the 45 workloads of the FUSE performance paper
# (Table 5/6 of "To FUSE or Not to FUSE"), in Filebench's language.
#
# Every file carries the paper's sizes as defaults, so it runs unchanged in
# Filebench on a big host; bench/workloads/scale/<SCALE>.vars overrides the
# size variables for smaller machines (xfilebench --vars). Thread counts are
# never scaled. Files named keep-* are preallocated once per target
# directory and reused (`reuse`); the runner removes everything else after
# each workload.
set -euo pipefail

OUT=$(cd "$(dirname "$0")" && pwd)/workloads

header() {
    local name=$1 what=$2 row=$3
    cat <<EOF
# $name: $what
# (FUSE performance paper, Table 5/6 row $row). Defaults are the paper's
# sizes; bench/workloads/scale/*.vars scales them down.
set \$dir=/tmp
set \$runtime=60
EOF
}

# data NAME OP THREADS FILES IOSIZE ROW
data() {
    local name=$1 op=$2 nth=$3 nf=$4 io=$5 row=$6 what flow target
    case "$op" in
        seq-rd) what="sequential reads" ;;
        rnd-rd) what="random reads" ;;
        seq-wr) what="sequential writes to new files" ;;
        rnd-wr) what="random writes" ;;
    esac
    header "$name" "$what, $nth thread(s), $nf file(s), $io I/O" "$row"
    echo "set \$iosize=$io"
    echo "set \$nthreads=$nth"
    case "$op-$nf" in
        *-rd-1 | rnd-wr-1)
            echo "set \$filesize1f=60g"
            echo
            echo "define file name=keep-file1f,path=\$dir,size=\$filesize1f,prealloc,reuse"
            target="filename=keep-file1f"
            ;;
        *-rd-32)
            echo "set \$filesize32f=2g"
            echo
            echo "define fileset name=keep-set32f,path=\$dir,size=\$filesize32f,entries=32,dirwidth=32,dirgamma=0,prealloc,reuse"
            target="filesetname=keep-set32f"
            ;;
        seq-wr-1)
            echo "set \$wrbytes1f=60g"
            echo
            echo "define file name=wrfile1f,path=\$dir,size=0,prealloc"
            target="filename=wrfile1f"
            ;;
        seq-wr-32)
            echo "set \$wrbytes32f=64g"
            echo
            echo "define fileset name=wrset32f,path=\$dir,size=0,entries=32,dirwidth=32,dirgamma=0,prealloc"
            target="filesetname=wrset32f"
            ;;
    esac
    case "$op" in
        seq-rd) flow="flowop read name=seqread,$target,iosize=\$iosize" ;;
        rnd-rd) flow="flowop read name=rndread,$target,iosize=\$iosize,random" ;;
        seq-wr) flow="flowop write name=seqwrite,$target,iosize=\$iosize" ;;
        rnd-wr) flow="flowop write name=rndwrite,$target,iosize=\$iosize,random" ;;
    esac
    cat <<EOF

define process name=${op},instances=1
{
  thread name=${op}thread,memsize=\$iosize,instances=\$nthreads
  {
    $flow
EOF
    if [ "$op" = seq-wr ]; then
        if [ "$nf" = 1 ]; then
            echo "    flowop finishonbytes name=finish,target=seqwrite,value=\$wrbytes1f"
        else
            echo "    flowop finishonbytes name=finish,target=seqwrite,value=\$wrbytes32f"
        fi
    fi
    cat <<EOF
  }
}

echo "$name: $what of \$iosize, \$nthreads thread(s), in \$dir"
run \$runtime
EOF
}

# meta NAME OP THREADS ROW
meta() {
    local name=$1 op=$2 nth=$3 row=$4
    case "$op" in
        cr)
            header "$name" "create 4 KiB files over 1,000 directories, $nth thread(s)" "$row"
            cat <<EOF
set \$nthreads=$nth
set \$crfiles=4000000
set \$crdirwidth=4000

define fileset name=crset,path=\$dir,size=4k,entries=\$crfiles,dirwidth=\$crdirwidth,dirgamma=0

define process name=filecreate,instances=1
{
  thread name=filecreatethread,memsize=4k,instances=\$nthreads
  {
    flowop createfile name=createfile1,filesetname=crset,fd=1
    flowop writewholefile name=writefile1,fd=1,iosize=4k
    flowop closefile name=closefile1,fd=1
  }
}
EOF
            ;;
        rd)
            header "$name" "open, read whole and close 4 KiB files over 1,000 directories, $nth thread(s)" "$row"
            cat <<EOF
set \$nthreads=$nth
set \$rdfiles=1000000
set \$rddirwidth=1000

define fileset name=keep-rdset,path=\$dir,size=4k,entries=\$rdfiles,dirwidth=\$rddirwidth,dirgamma=0,prealloc,reuse

define process name=fileread,instances=1
{
  thread name=filereadthread,memsize=4k,instances=\$nthreads
  {
    flowop openfile name=openfile1,filesetname=keep-rdset,fd=1
    flowop readwholefile name=readfile1,fd=1,iosize=4k
    flowop closefile name=closefile1,fd=1
  }
}
EOF
            ;;
        del)
            header "$name" "delete preallocated 4 KiB files over 1,000 directories, $nth thread(s)" "$row"
            cat <<EOF
set \$nthreads=$nth
set \$delfiles=4000000
set \$deldirwidth=4000

define fileset name=delset,path=\$dir,size=4k,entries=\$delfiles,dirwidth=\$deldirwidth,dirgamma=0,prealloc,paralloc

define process name=filedelete,instances=1
{
  thread name=filedeletethread,memsize=4k,instances=\$nthreads
  {
    flowop deletefile name=deletefile1,filesetname=delset
  }
}
EOF
            ;;
    esac
    cat <<EOF

echo "$name: \$nthreads thread(s) in \$dir"
run \$runtime
EOF
}

fileserver() {
    header file-server "Filebench's file-server personality (50 threads, 128 KiB mean file size)" 43
    cat <<'EOF'
set $nfiles=200000
set $meandirwidth=20
set $meanfilesize=128k
set $nthreads=50
set $iosize=1m
set $meanappendsize=16k

define fileset name=fsset,path=$dir,size=cvar(type=cvar-gamma,parameters=mean:$meanfilesize;gamma:1.5),entries=$nfiles,dirwidth=$meandirwidth,prealloc=80,paralloc

define process name=filereader,instances=1
{
  thread name=filereaderthread,memsize=10m,instances=$nthreads
  {
    flowop createfile name=createfile1,filesetname=fsset,fd=1
    flowop writewholefile name=wrtfile1,srcfd=1,fd=1,iosize=$iosize
    flowop closefile name=closefile1,fd=1
    flowop openfile name=openfile1,filesetname=fsset,fd=1
    flowop appendfilerand name=appendfilerand1,iosize=$meanappendsize,fd=1
    flowop closefile name=closefile2,fd=1
    flowop openfile name=openfile2,filesetname=fsset,fd=1
    flowop readwholefile name=readfile1,fd=1,iosize=$iosize
    flowop closefile name=closefile3,fd=1
    flowop deletefile name=deletefile1,filesetname=fsset
    flowop statfile name=statfile1,filesetname=fsset
  }
}

echo "file-server: $nthreads threads, $nfiles files of $meanfilesize mean in $dir"
run $runtime
EOF
}

mailserver() {
    header mail-server "Filebench's varmail personality (16 threads, 16 KiB mean file size, one flat directory)" 44
    cat <<'EOF'
set $nfiles=1500000
set $meandirwidth=1000000
set $meanfilesize=16k
set $nthreads=16
set $iosize=1m
set $meanappendsize=16k

define fileset name=mailset,path=$dir,size=cvar(type=cvar-gamma,parameters=mean:$meanfilesize;gamma:1.5),entries=$nfiles,dirwidth=$meandirwidth,prealloc=80,paralloc

define process name=mailserver,instances=1
{
  thread name=mailthread,memsize=10m,instances=$nthreads
  {
    flowop deletefile name=deletefile1,filesetname=mailset
    flowop createfile name=createfile2,filesetname=mailset,fd=1
    flowop appendfilerand name=appendfilerand2,iosize=$meanappendsize,fd=1
    flowop fsync name=fsyncfile2,fd=1
    flowop closefile name=closefile2,fd=1
    flowop openfile name=openfile3,filesetname=mailset,fd=1
    flowop readwholefile name=readfile3,fd=1,iosize=$iosize
    flowop appendfilerand name=appendfilerand3,iosize=$meanappendsize,fd=1
    flowop fsync name=fsyncfile3,fd=1
    flowop closefile name=closefile3,fd=1
    flowop openfile name=openfile4,filesetname=mailset,fd=1
    flowop readwholefile name=readfile4,fd=1,iosize=$iosize
    flowop closefile name=closefile4,fd=1
  }
}

echo "mail-server: $nthreads threads, $nfiles files of $meanfilesize mean in $dir"
run $runtime
EOF
}

webserver() {
    header web-server "Filebench's web-server personality (100 threads, 16 KiB mean file size, a shared log)" 45
    cat <<'EOF'
set $nfiles=1250000
set $meandirwidth=20
set $meanfilesize=16k
set $nthreads=100
set $iosize=1m
set $meanappendsize=16k

define fileset name=webset,path=$dir,size=cvar(type=cvar-gamma,parameters=mean:$meanfilesize;gamma:1.5),entries=$nfiles,dirwidth=$meandirwidth,prealloc,paralloc
define fileset name=weblog,path=$dir,size=0,entries=1,dirwidth=1,prealloc

define process name=webserver,instances=1
{
  thread name=webthread,memsize=10m,instances=$nthreads
  {
    flowop openfile name=openfile1,filesetname=webset,fd=1
    flowop readwholefile name=readfile1,fd=1,iosize=$iosize
    flowop closefile name=closefile1,fd=1
    flowop openfile name=openfile2,filesetname=webset,fd=1
    flowop readwholefile name=readfile2,fd=1,iosize=$iosize
    flowop closefile name=closefile2,fd=1
    flowop openfile name=openfile3,filesetname=webset,fd=1
    flowop readwholefile name=readfile3,fd=1,iosize=$iosize
    flowop closefile name=closefile3,fd=1
    flowop openfile name=openfile4,filesetname=webset,fd=1
    flowop readwholefile name=readfile4,fd=1,iosize=$iosize
    flowop closefile name=closefile4,fd=1
    flowop openfile name=openfile5,filesetname=webset,fd=1
    flowop readwholefile name=readfile5,fd=1,iosize=$iosize
    flowop closefile name=closefile5,fd=1
    flowop openfile name=openfile6,filesetname=webset,fd=1
    flowop readwholefile name=readfile6,fd=1,iosize=$iosize
    flowop closefile name=closefile6,fd=1
    flowop openfile name=openfile7,filesetname=webset,fd=1
    flowop readwholefile name=readfile7,fd=1,iosize=$iosize
    flowop closefile name=closefile7,fd=1
    flowop openfile name=openfile8,filesetname=webset,fd=1
    flowop readwholefile name=readfile8,fd=1,iosize=$iosize
    flowop closefile name=closefile8,fd=1
    flowop openfile name=openfile9,filesetname=webset,fd=1
    flowop readwholefile name=readfile9,fd=1,iosize=$iosize
    flowop closefile name=closefile9,fd=1
    flowop openfile name=openfile10,filesetname=webset,fd=1
    flowop readwholefile name=readfile10,fd=1,iosize=$iosize
    flowop closefile name=closefile10,fd=1
    flowop openfile name=openlog,filesetname=weblog,fd=2
    flowop appendfile name=appendlog,iosize=$meanappendsize,fd=2
    flowop closefile name=closelog,fd=2
  }
}

echo "web-server: $nthreads threads, $nfiles files of $meanfilesize mean in $dir"
run $runtime
EOF
}

main() {
    local row=1 op th nf io name
    mkdir -p "$OUT"
    rm -f "$OUT"/*.f
    for spec in seq-rd:1:1 seq-rd:32:1 seq-rd:32:32 rnd-rd:1:1 rnd-rd:32:1 seq-wr:1:1 seq-wr:32:32 rnd-wr:1:1 rnd-wr:32:1; do
        IFS=: read -r op th nf <<<"$spec"
        for io in 4k 32k 128k 1m; do
            name=$op-${th}th-${nf}f-$io
            data "$name" "$op" "$th" "$nf" "$io" "$row" >"$OUT/$name.f"
            row=$((row + 1))
        done
    done
    meta files-cr-1th cr 1 37 >"$OUT/files-cr-1th.f"
    meta files-cr-32th cr 32 38 >"$OUT/files-cr-32th.f"
    meta files-rd-1th rd 1 39 >"$OUT/files-rd-1th.f"
    meta files-rd-32th rd 32 40 >"$OUT/files-rd-32th.f"
    meta files-del-1th del 1 41 >"$OUT/files-del-1th.f"
    meta files-del-32th del 32 42 >"$OUT/files-del-32th.f"
    fileserver >"$OUT/file-server.f"
    mailserver >"$OUT/mail-server.f"
    webserver >"$OUT/web-server.f"
    echo "wrote $(find "$OUT" -maxdepth 1 -name '*.f' | wc -l) workloads to $OUT"
}

main "$@"
