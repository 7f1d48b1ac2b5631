## Manual pages.  ucma(7): the concepts and every UCMA_* variable; one man3
## page per group of functions, and a .so page named after each other
## function of the group; ucmastat(1).  tests/man_check.sh renders them all
## and checks that every function of include/ucma.h has its page.
dist_man_MANS += \
	man/ucma.7 \
	man/ucmastat.1 \
	man/ucma_alloc.3 \
	man/ucma_alloc_area.3 \
	man/ucma_release.3 \
	man/ucma_alloc_size.3 \
	man/ucma_virt2phys.3 \
	man/ucma_vtophys.3 \
	man/ucma_unlend.3 \
	man/ucma_unlend_all.3 \
	man/ucma_owns_fd.3 \
	man/ucma_mem_event_register.3 \
	man/ucma_mem_event_unregister.3 \
	man/ucma_halloc.3 \
	man/ucma_hfree.3 \
	man/ucma_hrealloc.3 \
	man/ucma_hsize.3 \
	man/ucma_pin.3 \
	man/ucma_unpin.3 \
	man/ucma_read_lock.3 \
	man/ucma_read_unlock.3 \
	man/ucma_deref.3 \
	man/ucma_deref_size.3 \
	man/ucma_compact.3 \
	man/ucma_compact_order.3 \
	man/ucma_malloc.3 \
	man/ucma_calloc.3 \
	man/ucma_realloc.3 \
	man/ucma_aligned_alloc.3 \
	man/ucma_posix_memalign.3 \
	man/ucma_memalign.3 \
	man/ucma_free.3 \
	man/ucma_try_free.3 \
	man/ucma_usable_size.3 \
	man/ucma_trim.3 \
	man/ucma_owns.3 \
	man/ucma_malloc_info.3 \
	man/ucma_init.3 \
	man/ucma_config_from_env.3 \
	man/ucma_backing_name.3 \
	man/ucma_stat.3 \
	man/ucma_stats_print.3 \
	man/ucma_stats_refresh.3
