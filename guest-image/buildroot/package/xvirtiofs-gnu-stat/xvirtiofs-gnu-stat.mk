# SPDX-License-Identifier: Apache-2.0
################################################################################
#
# xvirtiofs-gnu-stat
#
################################################################################

# Debian's coreutils (trixie): Buildroot's coreutils package is 9.5, which
# Debian does not have, and its patch does not apply to 9.7.
XVIRTIOFS_GNU_STAT_VERSION = 9.7
XVIRTIOFS_GNU_STAT_SOURCE = coreutils-$(XVIRTIOFS_GNU_STAT_VERSION).tar.xz
XVIRTIOFS_GNU_STAT_SITE = $(BR2_GNU_MIRROR)/coreutils
XVIRTIOFS_GNU_STAT_LICENSE = GPL-3.0+
XVIRTIOFS_GNU_STAT_LICENSE_FILES = COPYING

# Answers configure cannot find out when cross-compiling (glibc, Linux).
XVIRTIOFS_GNU_STAT_CONF_ENV = \
	ac_fsusage_space=yes \
	fu_cv_sys_stat_statfs2_bsize=yes \
	gl_cv_func_getcwd_null=yes \
	gl_cv_func_getcwd_path_max=yes \
	gl_cv_func_lstat_dereferences_slashed_symlink=yes \
	gl_cv_func_working_mkstemp=yes \
	gl_cv_macro_MB_CUR_MAX_good=yes \
	PERL=missing \
	MAKEINFO=true

XVIRTIOFS_GNU_STAT_CONF_OPTS = \
	--disable-rpath \
	--disable-nls \
	--disable-acl \
	--disable-xattr \
	--disable-libcap \
	--disable-single-binary \
	--without-selinux \
	--without-openssl \
	--without-libgmp

# Only stat: the generated headers (BUILT_SOURCES, which only "all" makes)
# first, then src/stat.
define XVIRTIOFS_GNU_STAT_BUILD_CMDS
	printf 'xvirtiofs-built-sources: $$(BUILT_SOURCES)\n' >$(@D)/xvirtiofs.mk
	$(TARGET_MAKE_ENV) $(MAKE) -C $(@D) -f Makefile -f xvirtiofs.mk \
		xvirtiofs-built-sources
	$(TARGET_MAKE_ENV) $(MAKE) -C $(@D) src/stat
endef

define XVIRTIOFS_GNU_STAT_INSTALL_TARGET_CMDS
	$(INSTALL) -D -m 0755 $(@D)/src/stat $(TARGET_DIR)/usr/bin/gnu-stat
endef

$(eval $(autotools-package))
