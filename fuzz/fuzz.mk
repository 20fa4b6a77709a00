# libFuzzer targets for the RPC wire decoders (src/rpc/wire.c) and the
# libfabric backend's frame decoder (src/core/ofi/frame.c), built with
# clang outside CMake: they compile those files alone and link no UCX or
# libfabric (the generated rdmx/version.h comes from the CMake build in
# build/).
# Used from the top-level Makefile (make fuzz, fuzz-smoke, fuzz-long); run
# from the repository root:
#   make -f fuzz/fuzz.mk fuzz              build into build-fuzz/
#   make -f fuzz/fuzz.mk run FUZZ_SECONDS=N  run each target N seconds
#
# build-fuzz/
#   fuzz_hdr fuzz_bulk fuzz_welcome fuzz_ring   the targets
#   gen_seeds, seeds/TARGET/          seed corpora, regenerated from the encoders
#   corpus/TARGET/                    working corpus, grows across runs
#   artifacts/                        crashing inputs (TARGET-crash-...)
#   TARGET.log                        output of the last run

FUZZ_CC      ?= clang
FUZZ_DIR     ?= build-fuzz
FUZZ_SECONDS ?= 10
FUZZ_TARGETS := hdr bulk welcome ring ofi_frame

FUZZ_WARN    := -Wall -Wextra -Wshadow -Wno-unused-parameter
FUZZ_CFLAGS  := -std=gnu11 -g -O1 -fno-omit-frame-pointer \
                -fsanitize=fuzzer,address,undefined \
                -fno-sanitize-recover=undefined \
                $(FUZZ_WARN) -I include -I build/include -I src
WIRE_DEPS    := src/rpc/wire.c src/rpc/wire.h src/util/endian.h \
                src/util/hash.h include/rdmx/status.h fuzz/fuzz.h fuzz/fuzz.mk

FUZZ_BINS    := $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%)
SEED_STAMP   := $(FUZZ_DIR)/seeds/.stamp

.PHONY: fuzz run
.DELETE_ON_ERROR:

fuzz: $(FUZZ_BINS) $(SEED_STAMP)

$(FUZZ_DIR):
	@mkdir -p $@

# The libfabric backend's frame decoder: frame.c alone (no libfabric).
OFI_FRAME_DEPS := src/core/ofi/frame.c src/core/ofi/frame.h src/util/endian.h \
                  fuzz/fuzz.mk
$(FUZZ_DIR)/fuzz_ofi_frame: fuzz/fuzz_ofi_frame.c $(OFI_FRAME_DEPS) | $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< src/core/ofi/frame.c

$(FUZZ_DIR)/fuzz_%: fuzz/fuzz_%.c $(WIRE_DEPS) | $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< src/rpc/wire.c

$(FUZZ_DIR)/gen_seeds: fuzz/gen_seeds.c $(WIRE_DEPS) | $(FUZZ_DIR)
	$(FUZZ_CC) -std=gnu11 -g -O1 $(FUZZ_WARN) -I include -I build/include -I src \
	  -o $@ $< src/rpc/wire.c

$(SEED_STAMP): $(FUZZ_DIR)/gen_seeds
	@rm -rf $(FUZZ_DIR)/seeds
	@$(FUZZ_DIR)/gen_seeds $(FUZZ_DIR)/seeds
	@mkdir -p $(FUZZ_DIR)/seeds/ofi_frame
	@printf '\001\021\004\000\005\000\000\000\000\000\000\000\000\000\000\000abcdxy' \
	  >$(FUZZ_DIR)/seeds/ofi_frame/eager
	@touch $@

run: fuzz
	@fuzz/run.sh $(FUZZ_DIR) $(FUZZ_SECONDS) $(FUZZ_TARGETS)
