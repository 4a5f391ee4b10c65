# SPDX-License-Identifier: Apache-2.0
################################################################################
#
# xvirtiofs-test-agents
#
################################################################################

# Files of the xvirtiofs repository this external tree lives in: no download.
XVIRTIOFS_TEST_AGENTS_REPO = $(BR2_EXTERNAL_XVIRTIOFS_PATH)/../..
XVIRTIOFS_TEST_AGENTS_LICENSE = Apache-2.0

define XVIRTIOFS_TEST_AGENTS_INSTALL_TARGET_CMDS
	$(INSTALL) -D -m 0755 $(XVIRTIOFS_TEST_AGENTS_REPO)/tests/vm/guest-agent.sh \
		$(TARGET_DIR)/usr/libexec/xvirtiofs/guest-agent.sh
	$(INSTALL) -D -m 0755 $(XVIRTIOFS_TEST_AGENTS_REPO)/tests/vm/ops-steps.sh \
		$(TARGET_DIR)/usr/libexec/xvirtiofs/ops-steps.sh
endef

$(eval $(generic-package))
