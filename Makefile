# SPDX-License-Identifier: Apache-2.0
# xvirtiofs developer entry points. Run `make help` for the list.
#
# Every target does its own set-up on a fresh Debian 12 machine (as root):
# vm and test run deps -> build -> image first.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# rustup installs cargo here; make it visible to every recipe.
export PATH := $(HOME)/.cargo/bin:$(PATH)

DEFAULT_DAEMON := $(CURDIR)/host/target/release/xvirtiofsd

# Knobs of `make vm` (see vmm-config/run-vm --help for all of them).
SHARE ?= $(CURDIR)/shared
CMD ?=
QUEUES ?= 1
VCPUS ?= 2
MEM ?= 1G
DAEMON ?= $(DEFAULT_DAEMON)
DAEMON_ARGS ?=
XVFS_ACCEL ?=
export SHARE CMD QUEUES VCPUS MEM DAEMON DAEMON_ARGS XVFS_ACCEL

# Runtimes (issue 31, vmm-config/runtimes.sh): QEMU=7.2|10.0|11.1 and
# KERNEL=6.1|6.12|7 for deps, image, vm and the VM tests. The defaults (10.0,
# the host's QEMU from bookworm-backports, and 6.12 in build/guest/) are what
# these targets always used. Passed on as XVFS_QEMU and XVFS_GUEST_KERNEL.
QEMU ?= $(or $(XVFS_QEMU),10.0)
KERNEL ?= $(or $(XVFS_GUEST_KERNEL),6.12)
ifeq ($(filter $(QEMU),7.2 10.0 11.1),)
$(error QEMU must be 7.2, 10.0 or 11.1, not '$(QEMU)')
endif
ifeq ($(filter $(KERNEL),6.1 6.12 7),)
$(error KERNEL must be 6.1, 6.12 or 7, not '$(KERNEL)')
endif
export XVFS_QEMU := $(QEMU)
export XVFS_GUEST_KERNEL := $(KERNEL)
# make vm QEMU=11.1 DAX=512M: a DAX window of that size (experimental,
# docs/dax-design.md); passed on as XVFS_DAX.
ifneq ($(DAX),)
ifneq ($(QEMU),11.1)
$(error DAX= needs QEMU=11.1 (the shared-memory protocol came in QEMU 11))
endif
export XVFS_DAX := $(DAX)
endif

# make test-matrix: every QEMU x kernel pair runs these tests (tests/matrix.sh).
MATRIX_QEMU ?= 7.2 10.0 11.1
MATRIX_KERNELS ?= 6.1 6.12 7
MATRIX_TESTS ?= test_ops test_upgrade test_migrate test_multiqueue test_crash test_options test_locks
export MATRIX_QEMU MATRIX_KERNELS MATRIX_TESTS

# `make vm DAEMON=/opt/.../virtiofsd` does not need our daemon built.
VM_BUILD := $(if $(filter $(DEFAULT_DAEMON),$(abspath $(DAEMON))),build)

# The guest image of image, vm, bench*, upgrade-demo, crash-demo: debian
# (guest-image/build.sh, the default) or buildroot (guest-image/buildroot/,
# docs/buildroot.md; it carries xfilebench, so it needs `make build`).
IMAGE ?= debian
ifeq ($(IMAGE),debian)
IMAGE_SCRIPT := guest-image/build.sh
IMAGE_NEEDS :=
else ifeq ($(IMAGE),buildroot)
IMAGE_SCRIPT := guest-image/buildroot/build.sh
IMAGE_NEEDS := build
export XVFS_KERNEL ?= $(CURDIR)/build/guest-buildroot/vmlinux
export XVFS_INITRD ?= $(CURDIR)/build/guest-buildroot/initramfs.cpio
else
$(error IMAGE must be debian or buildroot, not '$(IMAGE)')
endif

.PHONY: help deps daemon build image vm test check test-fresh test-matrix test-buildroot clean bench bench-quick bench-dax bench-filebench-compare upgrade-demo crash-demo migrate-soak bench-daemon deb fuzz

help:
	@echo 'make deps    install host packages, QEMU (backports), Rust, upstream virtiofsd 1.14.0'
	@echo '             QEMU=7.2|11.1: that QEMU as well, under build/runtimes/ (default 10.0: the host QEMU)'
	@echo 'make daemon  only the daemon: host/target/release/xvirtiofsd (needs cargo; installs'
	@echo '             nothing and changes nothing on the host)'
	@echo 'make build   make deps, then every crate of host/ (the daemon, loadgen, xfilebench)'
	@echo 'make image   build the guest kernel + initramfs (build/guest/)'
	@echo '             KERNEL=6.1|7: a guest of that kernel in build/guest-<KERNEL>/ (default 6.12)'
	@echo '             IMAGE=buildroot: the Buildroot guest, built offline from Debian sources'
	@echo '             (build/guest-buildroot/, docs/buildroot.md); vm, bench* take IMAGE= too'
	@echo 'make vm      boot a guest on SHARE (default ./shared), mounted on /mnt/shared'
	@echo "             CMD='...' runs one guest command; QUEUES VCPUS MEM XVFS_ACCEL DAEMON DAEMON_ARGS"
	@echo '             QEMU=7.2|10.0|11.1 KERNEL=6.1|6.12|7 pick the runtime (make deps / image install them)'
	@echo '             DAX=64M (QEMU=11.1, experimental): a DAX window, the share mounted with dax=inode'
	@echo '             (XVFS_MOUNT_OPTS=dax=always for every file; docs/dax-design.md)'
	@echo 'make test    fmt, clippy, cargo test, shellcheck, VM tests; "N passed, M failed"'
	@echo 'make check   the inner loop: fmt, clippy, cargo test, shellcheck, SPDX lines, import'
	@echo '             cycles, README command lines (no deps, image or VM; tests/run-all.sh --check)'
	@echo 'make test-fresh  a clean Debian 12 root (mmdebstrap) runs README'"'"'s set-up and test'
	@echo '             commands as written: each command, pass/fail, time (tests/fresh/run.sh; ~1 h)'
	@echo 'make test-matrix  MATRIX_TESTS for each pair of MATRIX_QEMU x MATRIX_KERNELS: a table of'
	@echo '             passed / failed / n/a (with the reason), "N passed, M failed";'
	@echo '             report in build/test-logs/matrix-<date>.md (tests/matrix.sh --help)'
	@echo 'make test-buildroot  build the Buildroot image (cached), run test_ops and test_filebench in it'
	@echo 'make upgrade-demo  boot a guest with fio running, upgrade the daemon 20 times under it,'
	@echo '             print the guest-visible pause and the error count'
	@echo 'make migrate-soak  one VM moved N (100) times: xvirtiofsd <-> xvirtiofsd, to and from'
	@echo '             virtiofsd, snapshot + restore, under fio verify; downtime per direction'
	@echo 'make crash-demo  the same with --crash-restart and 20 kill -9 of the serving process,'
	@echo '             then a kill inside each operation and the crash loop (tests/vm/test_crash.sh)'
	@echo 'make fuzz    run each fuzz target (FUSE requests, virtqueues) for FUZZ_SECONDS (600) and'
	@echo '             print how many inputs each ran'
	@echo 'make libvirt-up  install libvirt 11 (bookworm-backports) and start virtlogd + libvirtd by hand'
	@echo 'make install  make daemon, then xvirtiofsd -> $$(PREFIX)/libexec and $$(PREFIX)/bin (on PATH),'
	@echo '             vhost-user descriptor -> /etc/qemu/vhost-user/ (libvirt then finds it without'
	@echo '             <binary path>), man pages, systemd unit xvirtiofsd@.service, completions;'
	@echo '             make uninstall removes them'
	@echo 'make deb     build/deb/xvirtiofsd_<version>_amd64.deb: daemon, vhost-user descriptor,'
	@echo '             man pages, systemd unit xvirtiofsd@.service (packaging/deb/)'
	@echo 'make clean   remove build/'
	@echo 'make bench        the 45 Filebench workloads of the FUSE paper: xvirtiofsd (1 queue, and'
	@echo '                  2 queues + polling), virtiofsd, host native, guest tmpfs side by side'
	@echo '                  -> bench/results/<date>-<rev>/'
	@echo 'make bench-quick  the same for a dozen of them (about 15 minutes under TCG)'
	@echo 'make bench-daemon  xvirtiofsd vs virtiofsd vs host syscalls with bench/loadgen (no VM, ~34 min);'
	@echo '             report in bench/results/daemon-<date>-<rev>/ (BENCH_SECS BENCH_REPS BENCH_CASES'
	@echo '             BENCH_HALT_POLL_NS: guest halt-polling window for the run, on a VM host)'
	@echo 'make bench-filebench-compare  xfilebench vs Filebench 1.5-alpha3 (built from source in'
	@echo '             build/filebench/) on every stock personality, per flowop -> bench/results/filebench-compare-*/'
	@echo 'make bench-dax  QEMU 11.1: fio mmap/psync through the DAX window vs --cache auto/always,'
	@echo '             and the host memory of two guests reading one file -> bench/results/dax-*/'

deps:
	@vmm-config/install-deps.sh
ifneq ($(QEMU),10.0)
	@vmm-config/runtimes.sh qemu $(QEMU)
endif

# Only the daemon, with the Rust already there: no apt, no rustup, nothing
# on the host changes.
daemon:
	@command -v cargo >/dev/null || { echo 'make daemon: cargo not found: install Rust (https://rustup.rs) or run make deps' >&2; exit 1; }
	cd host && cargo build --release -p xvirtiofsd

build: deps
	cd host && cargo build --release

image: deps $(IMAGE_NEEDS)
	@$(IMAGE_SCRIPT)

# Make itself exits 2 when the guest command fails; "Error N" shows its status,
# and vmm-config/run-vm returns it unchanged.
vm: deps $(VM_BUILD) image
	@vmm-config/run-vm

test: deps build image
	@tests/run-all.sh

# No deps, image or VM: what a change can be checked with in a minute or two.
check:
	@tests/run-all.sh --check

# README's commands on a clean Debian 12 root (tests/fresh/run.sh --help).
# Not part of `make test`: it builds everything from nothing (about an hour).
test-fresh:
	@tests/fresh/run.sh
# Installs the runtimes and images it needs itself (cached).
test-matrix: deps build
	@tests/matrix.sh

# Not part of `make test`: a cold Buildroot build takes a while (docs/buildroot.md).
test-buildroot: deps build
	@guest-image/buildroot/build.sh
	@guest-image/buildroot/test.sh

upgrade-demo: deps build image
	@tests/vm/test_upgrade.sh

# One VM moved N times: xvirtiofsd <-> xvirtiofsd, to and from virtiofsd,
# snapshot + restore (tests/vm/migrate_soak.sh). Not part of `make test`.
N ?= 100
migrate-soak: deps build image
	@N=$(N) tests/vm/migrate_soak.sh

crash-demo: deps build image
	@tests/vm/test_crash.sh

# The fuzz targets (host/fuzz/run.sh --help), each for FUZZ_SECONDS.
FUZZ_SECONDS ?= 600
fuzz: deps
	@host/fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -rf build

# The Debian package (packaging/deb/build-deb.sh); its path is the last line.
deb: daemon
	@packaging/deb/build-deb.sh

# The daemon benchmark: loadgen plays VMM and guest, so it needs no image.
bench-daemon: build
	@bench/bench-daemon.sh

# libvirt (see vmm-config/README.md and docs/libvirt.md). PREFIX, DESTDIR and
# VHOST_USER_DIR are the usual install knobs; the descriptor's "binary" is
# rewritten to the installed path. Name it 40-xvirtiofsd.json (DESCRIPTOR=...)
# to win over a distribution's 50-virtiofsd.json: libvirt takes the first
# "type": "fs" descriptor by file name.
PREFIX ?= /usr/local
VHOST_USER_DIR ?= /etc/qemu/vhost-user
DESCRIPTOR ?= 50-xvirtiofsd.json
INSTALLED_DAEMON := $(PREFIX)/libexec/xvirtiofsd
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
UNITDIR ?= $(PREFIX)/lib/systemd/system
DOCDIR ?= $(PREFIX)/share/doc/xvirtiofsd
# The binary install-files copies (tests/readme_commands.sh installs a
# debug build into a scratch DESTDIR with it).
DAEMON_BIN ?= host/target/release/xvirtiofsd
INSTALLED_FILES := $(INSTALLED_DAEMON) $(BINDIR)/xvirtiofsd $(VHOST_USER_DIR)/$(DESCRIPTOR) \
	$(MANDIR)/man1/xvirtiofsd.1 $(MANDIR)/man1/xvirtiofsd-status.1 \
	$(MANDIR)/man1/xvirtiofsd-upgrade.1 $(MANDIR)/man1/xvirtiofsd-completions.1 \
	$(UNITDIR)/xvirtiofsd@.service $(DOCDIR)/examples/share.conf \
	$(PREFIX)/share/bash-completion/completions/xvirtiofsd \
	$(PREFIX)/share/zsh/site-functions/_xvirtiofsd \
	$(PREFIX)/share/fish/vendor_completions.d/xvirtiofsd.fish

.PHONY: libvirt-up libvirt-down install install-files uninstall

libvirt-up: deps
	@vmm-config/libvirt-up

libvirt-down:
	@vmm-config/libvirt-up --stop

install: daemon
	@$(MAKE) --no-print-directory install-files

install-files:
	install -D -m 0755 $(DAEMON_BIN) $(DESTDIR)$(INSTALLED_DAEMON)
	install -d -m 0755 $(DESTDIR)$(BINDIR) $(DESTDIR)$(VHOST_USER_DIR) $(DESTDIR)$(MANDIR)/man1 \
		$(DESTDIR)$(UNITDIR) $(DESTDIR)$(DOCDIR)/examples \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions \
		$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	ln -sfn $(INSTALLED_DAEMON) $(DESTDIR)$(BINDIR)/xvirtiofsd
	sed 's|"binary": ".*"|"binary": "$(INSTALLED_DAEMON)"|' vmm-config/50-xvirtiofsd.json \
		>$(DESTDIR)$(VHOST_USER_DIR)/$(DESCRIPTOR)
	chmod 0644 $(DESTDIR)$(VHOST_USER_DIR)/$(DESCRIPTOR)
	cd host && cargo run -q -p xvirtiofsd --example xvirtiofsd-man -- "$(abspath $(DESTDIR)$(MANDIR))/man1"
	chmod 0644 $(DESTDIR)$(MANDIR)/man1/xvirtiofsd*.1
	sed 's|/usr/libexec/xvirtiofsd|$(INSTALLED_DAEMON)|g' packaging/deb/xvirtiofsd@.service \
		>$(DESTDIR)$(UNITDIR)/xvirtiofsd@.service
	install -m 0644 packaging/deb/share.conf $(DESTDIR)$(DOCDIR)/examples/share.conf
	$(DAEMON_BIN) completions bash >$(DESTDIR)$(PREFIX)/share/bash-completion/completions/xvirtiofsd
	$(DAEMON_BIN) completions zsh >$(DESTDIR)$(PREFIX)/share/zsh/site-functions/_xvirtiofsd
	$(DAEMON_BIN) completions fish >$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/xvirtiofsd.fish
	@echo 'installed; xvirtiofsd is $(BINDIR)/xvirtiofsd. For the unit: systemctl daemon-reload'

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED_FILES))
	-rmdir $(DESTDIR)$(VHOST_USER_DIR) $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) 2>/dev/null

# Filebench suite side by side (bench/bench.sh --help); BENCH_ARGS adds options,
# e.g. BENCH_ARGS='--reps 3'.
BENCH_ARGS ?=
bench: deps build image
	@bench/bench.sh --list all $(BENCH_ARGS)

bench-quick: deps build image
	@bench/bench.sh --list quick $(BENCH_ARGS)

# xfilebench against Filebench 1.5-alpha3 built from its public source in
# build/filebench/ (bench/filebench-compare.sh --help); COMPARE_ARGS adds
# options, e.g. COMPARE_ARGS='--reps 5 --secs 5'.
COMPARE_ARGS ?=
bench-filebench-compare: build
	@bench/filebench-compare.sh $(COMPARE_ARGS)

# QEMU 11.1's DAX window against --cache auto and always (bench/bench-dax.sh).
bench-dax: deps build image
	@bench/bench-dax.sh
