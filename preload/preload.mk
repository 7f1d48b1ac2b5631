## The LD_PRELOAD malloc interposer (libucma-preload.so).
