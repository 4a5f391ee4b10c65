# SPDX-License-Identifier: Apache-2.0
################################################################################
#
# xvirtiofs-workloads
#
################################################################################

# Files of the xvirtiofs repository this external tree lives in: no download.
XVIRTIOFS_WORKLOADS_REPO = $(BR2_EXTERNAL_XVIRTIOFS_PATH)/../..
XVIRTIOFS_WORKLOADS_LICENSE = Apache-2.0

define XVIRTIOFS_WORKLOADS_INSTALL_TARGET_CMDS
	rm -rf $(TARGET_DIR)/usr/share/xvirtiofs/workloads
	mkdir -p $(TARGET_DIR)/usr/share/xvirtiofs/workloads/scale
	$(INSTALL) -m 0644 $(XVIRTIOFS_WORKLOADS_REPO)/bench/workloads/*.f \
		$(XVIRTIOFS_WORKLOADS_REPO)/bench/workloads/*.list \
		$(TARGET_DIR)/usr/share/xvirtiofs/workloads/
	$(INSTALL) -m 0644 $(XVIRTIOFS_WORKLOADS_REPO)/bench/workloads/scale/*.vars \
		$(TARGET_DIR)/usr/share/xvirtiofs/workloads/scale/
	mkdir -p $(TARGET_DIR)/opt/xvfs
	ln -sfn /usr/share/xvirtiofs/workloads $(TARGET_DIR)/opt/xvfs/workloads
endef

$(eval $(generic-package))
