# Corpus: cvars, randvars and composite flowops.
set $dir=/tmp
set $g=cvar(type=cvar-gamma,parameters=mean:4k;gamma:1.5)
set $u=cvar(type=cvar-uniform,parameters=lower:1k;upper:8k)
set $n=cvar(type=cvar-normal,parameters=mean:4k;sigma:512)
set $e=cvar(type=cvar-exponential,parameters=mean:4k)
set $er=cvar(type=cvar-erlang,parameters=shape:2;rate:0.0005)
set $ln=cvar(type=cvar-lognormal,parameters=shape:0.5;scale:8)
set $tr=cvar(type=cvar-triangular,parameters=lower:1k;upper:8k;mode:2k)
set $w=cvar(type=cvar-weibull,parameters=shape:2;scale:4k)
set $rt = randvar(type=tabular, min=1k, round=1k, randtable =
{{ 60, 1k, 4k},
 { 40, 4k, 8k}
})
define randvar name=$rg, type=gamma, min=1k, mean=4k, gamma=1500
set $ru = randvar(type=uniform, min=1k, mean=4k)
define fileset name=a,path=$dir,size=$g,entries=20,prealloc
define flowop name=rw, $fs, $sz
{
  flowop openfile name=o,filesetname=$fs,fd=1
  flowop read name=r,fd=1,iosize=$sz
  flowop closefile name=c,fd=1
}
define process name=p
{
  thread name=t
  {
    flowop rw name=rw1, iters=2, $fs=a, $sz=$u
    flowop read name=r2,filesetname=a,iosize=$n
    flowop read name=r3,filesetname=a,iosize=$e
    flowop read name=r4,filesetname=a,iosize=$er
    flowop read name=r5,filesetname=a,iosize=$ln
    flowop read name=r6,filesetname=a,iosize=$tr
    flowop read name=r7,filesetname=a,iosize=$w
    flowop read name=r8,filesetname=a,iosize=$rt
    flowop read name=r9,filesetname=a,iosize=$rg
    flowop statfile name=s,filesetname=a,indexed=$ru
  }
}
run 1
