# Thin wrapper over CMake. `make` builds into build/ (binaries in build/bin/).
#   make            RelWithDebInfo build
#   make debug      Debug build in build-debug/
#   make release    Release build in build-release/
#   make asan       ASan+UBSan build in build-asan/
#   make test       build, check the layering (scripts/check-layers.sh), run
#                   the test suite (CTest) over tcp and shm, then fuzz-smoke
#   make test-asan  the suite under ASan+UBSan (without the libfabric
#                   backend's label, ofi: the CI time budget)
#   make test-ofi   build, run the libfabric backend's tests (ctest -L ofi)
#   make test-ucx UCX_PREFIX=DIR
#                   build against the UCX installed in DIR (its headers and
#                   pkg-config file) in build-ucx/, run the suite with DIR/lib
#                   first on the library path (docs/CORE.md, "UCX versions")
#   make demo       build, then run rdmx-demo's modes between two processes
#   make install    install into PREFIX (default /usr/local); the Python
#                   module into PREFIX/lib/python3.X/dist-packages
#   make format     clang-format the sources
#   make fuzz       libFuzzer targets of the RPC wire decoders in build-fuzz/
#   make fuzz-smoke run each fuzz target FUZZ_SECONDS (default 10) seconds
#   make fuzz-long  the same, FUZZ_LONG_SECONDS (default 300) seconds each
#
# CI gates (.ci/run, docs/DEVELOPMENT.md):
#   make format-check  clang-format on the lines changed since .ci/format-base
#   make clang      compile everything with clang in build-clang/ (no tests)
#   make tidy       clang-tidy (.clang-tidy) on src/, tools/ and python/
#   make tsan       ThreadSanitizer build in build-tsan/ (TSAN_TARGETS only)
#   make test-tsan  the threaded tests (TSAN_TESTS) under ThreadSanitizer
#   make deb        Debian packages (debian/) into build-deb/
#   make test-deb   build the packages, unpack them into a scratch root and
#                   run the installed tools and Python module from it

PREFIX ?= /usr/local
JOBS   ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 10
FUZZ_LONG_SECONDS ?= 300

.PHONY: all build debug release asan test test-asan test-ofi test-ucx demo install format clean deps
.PHONY: format-check clang tidy tsan test-tsan deb test-deb

all: build

deps:
	@scripts/bootstrap.sh --check >/dev/null 2>&1 || scripts/bootstrap.sh

define cmake_build
	@cmake -S . -B $(1) -DCMAKE_BUILD_TYPE=$(2) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(3) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(1) -j $(JOBS)
endef

# The libfabric backend is required here (-DRDMX_OFI=ON): a build without it
# fails loudly instead of skipping its tests.
OFI_FLAGS ?= -DRDMX_OFI=ON

build: deps
	$(call cmake_build,build,RelWithDebInfo,-DRDMX_PYTHON=ON $(OFI_FLAGS))

debug: deps
	$(call cmake_build,build-debug,Debug,$(OFI_FLAGS))

release: deps
	$(call cmake_build,build-release,Release,$(OFI_FLAGS))

asan: deps
	$(call cmake_build,build-asan,Debug,-DRDMX_SANITIZE=ON $(OFI_FLAGS))

test: build
	@scripts/check-layers.sh
	cd build && ctest --output-on-failure --timeout 300 -j 2
	@$(MAKE) --no-print-directory fuzz-smoke

test-asan: asan
	cd build-asan && LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  ctest --output-on-failure --timeout 600 -j 2 -LE ofi

test-ofi: build
	cd build && ctest --output-on-failure --timeout 300 -j 2 -L ofi

# (UCX warns about any UCX_* variable it does not know: keep this one out of
# the tests' environment.)
unexport UCX_PREFIX
test-ucx: deps
	@test -n "$(UCX_PREFIX)" && test -f "$(UCX_PREFIX)/lib/pkgconfig/ucx.pc" || \
	  { echo "make test-ucx: set UCX_PREFIX to a UCX install prefix (DIR/lib/pkgconfig/ucx.pc)" >&2; exit 2; }
	@PKG_CONFIG_PATH=$(UCX_PREFIX)/lib/pkgconfig cmake -S . -B build-ucx \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=$(PREFIX) \
	  -DCMAKE_BUILD_RPATH=$(UCX_PREFIX)/lib $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-ucx -j $(JOBS)
	cd build-ucx && env -u UCX_PREFIX \
	  LD_LIBRARY_PATH=$(UCX_PREFIX)/lib$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH} \
	  ctest --output-on-failure --timeout 300 -j 2

demo: build
	scripts/demo.sh build/bin

install: build
	cmake --install build

format:
	clang-format -i include/rdmx/*.h src/*/*.[ch] tools/*.c tools/*/*.[ch] tests/*.[ch]

clean:
	rm -rf build build-debug build-release build-asan build-ucx build-clang \
	  build-tsan build-deb

# --- CI gates (docs/DEVELOPMENT.md) -------------------------------------------
format-check:
	scripts/check-format.sh

clang: deps
	$(call cmake_build,build-clang,RelWithDebInfo,-DCMAKE_C_COMPILER=clang -DRDMX_PYTHON=ON)

# clang-tidy reads compile_commands.json from build/ (the default gcc build),
# less the gcc-only string-strategy flags clang does not know (CMakeLists.txt).
tidy: build
	mkdir -p build/tidy
	sed -E 's/ -mmem(cpy|set)-strategy=[^ "]*//g' build/compile_commands.json \
	  > build/tidy/compile_commands.json
	run-clang-tidy -p build/tidy -quiet -j $(JOBS) '^$(CURDIR)/(src|tools|python)/.*\.c$$'

# The tests that run threads of their own next to the test's main thread
# (not lambda_sandbox: TSan's slowdown makes its memory-budget cases hit
# their 1 s time budget first; docs/DEVELOPMENT.md).
TSAN_TESTS ?= ^(progress_thread|worker_tasks|rpc_calls|kv_ops|unit_bufcache|unit_hmac|unit_ring)($$|\.)
# What they run (kv_ops starts rdmx-kvd and rdmx-kv): only these are built.
TSAN_TARGETS ?= test_progress_thread test_worker_tasks test_rpc_calls \
  test_kv_ops test_unit_bufcache test_unit_hmac test_unit_ring rdmx-kvd rdmx-kv
TSAN_FLAGS = -fsanitize=thread -fno-omit-frame-pointer
tsan: deps
	@cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DRDMX_PYTHON=OFF -DCMAKE_C_FLAGS="$(TSAN_FLAGS)" \
	  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread \
	  -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread \
	  -DCMAKE_MODULE_LINKER_FLAGS=-fsanitize=thread $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-tsan -j $(JOBS) --target $(TSAN_TARGETS)

# UCX's memory hooks crash under TSan when a thread exits: they stay off.
test-tsan: tsan
	cd build-tsan && UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=no \
	  TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1" \
	  ctest --output-on-failure --timeout 600 -j 2 -R '$(TSAN_TESTS)'

deb: deps
	scripts/build-deb.sh

test-deb: deb
	scripts/test-deb.sh build-deb

# --- fuzzing (fuzz/fuzz.mk: clang + libFuzzer, no UCX) -----------------------
.PHONY: fuzz fuzz-smoke fuzz-long fuzz-clean

fuzz: build
	@$(MAKE) --no-print-directory -f fuzz/fuzz.mk fuzz

fuzz-smoke: fuzz
	@$(MAKE) --no-print-directory -f fuzz/fuzz.mk run FUZZ_SECONDS=$(FUZZ_SECONDS)

fuzz-long: fuzz
	@$(MAKE) --no-print-directory -f fuzz/fuzz.mk run FUZZ_SECONDS=$(FUZZ_LONG_SECONDS)

fuzz-clean:
	rm -rf build-fuzz
