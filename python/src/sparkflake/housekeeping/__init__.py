"""The operator's housekeeping of sparkflake's cache: what each build used (``build_record``),
what the cache holds, by kind (``cache_entries``), and what may go (``cache_gc``)."""
