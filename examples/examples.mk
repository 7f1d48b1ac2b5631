## Example programs a user copies from; built by `make`.
noinst_PROGRAMS += examples/demo
examples_demo_LDADD = libucma.la

.PHONY: demo
demo: examples/demo$(EXEEXT)
	./examples/demo$(EXEEXT)
