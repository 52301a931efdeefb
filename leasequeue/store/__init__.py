"""The storage layer: key names, the Lua scripts and their typed calls, the
job record, connections and shards. Nothing here runs handlers."""
