"""Role adapters: DataProto in, engine calls, DataProto out. No FSDP or offload logic lives here."""
