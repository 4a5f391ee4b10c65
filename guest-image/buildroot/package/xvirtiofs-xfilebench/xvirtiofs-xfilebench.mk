# SPDX-License-Identifier: Apache-2.0
################################################################################
#
# xvirtiofs-xfilebench
#
################################################################################

# Files of the xvirtiofs repository this external tree lives in: no download.
XVIRTIOFS_XFILEBENCH_REPO = $(BR2_EXTERNAL_XVIRTIOFS_PATH)/../..
XVIRTIOFS_XFILEBENCH_BINARY ?= $(XVIRTIOFS_XFILEBENCH_REPO)/host/target/release/xfilebench
XVIRTIOFS_XFILEBENCH_LICENSE = Apache-2.0

define XVIRTIOFS_XFILEBENCH_INSTALL_TARGET_CMDS
	test -x $(XVIRTIOFS_XFILEBENCH_BINARY) || \
		{ echo "$(XVIRTIOFS_XFILEBENCH_BINARY) not found: run 'make build'"; exit 1; }
	$(INSTALL) -D -m 0755 $(XVIRTIOFS_XFILEBENCH_BINARY) \
		$(TARGET_DIR)/usr/bin/xfilebench
	$(INSTALL) -D -m 0755 $(XVIRTIOFS_XFILEBENCH_REPO)/bench/run-workloads.sh \
		$(TARGET_DIR)/usr/bin/xvfs-bench-run
	$(INSTALL) -D -m 0755 $(XVIRTIOFS_XFILEBENCH_REPO)/bench/guest-drop.sh \
		$(TARGET_DIR)/usr/bin/xvfs-drop-caches
	mkdir -p $(TARGET_DIR)/opt/xvfs/bin
	ln -sf /usr/bin/xfilebench $(TARGET_DIR)/opt/xvfs/bin/xfilebench
	ln -sf /usr/bin/xvfs-bench-run $(TARGET_DIR)/opt/xvfs/bin/xvfs-bench-run
	ln -sf /usr/bin/xvfs-drop-caches $(TARGET_DIR)/opt/xvfs/bin/xvfs-drop-caches
endef

$(eval $(generic-package))
