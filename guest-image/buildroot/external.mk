include $(sort $(wildcard $(BR2_EXTERNAL_XVIRTIOFS_PATH)/package/*/*.mk))
