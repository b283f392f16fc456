EXTENSION    = outbox
EXTVERSION   = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" $(EXTENSION).control)
MODULE_big   = $(EXTENSION)
# The destination kinds, one folder each under src/kinds/, and the
# libraries each links: src/kinds/kinds.list. A kind marked optional there
# is left out with `make with_<kind>=no` (e.g. with_jetstream=no: no
# libnats); its folder's stub/ then supplies its SQL functions, which
# raise an error saying the build has no such kind.
kind_field   = $(shell awk -v k=$(1) '$$1 == k { print $$$(2) }' src/kinds/kinds.list)
KINDS_ALL   := $(shell awk '!/^\#/ && NF { print $$1 }' src/kinds/kinds.list)
KINDS       := $(foreach k,$(KINDS_ALL),$(if $(and $(filter yes,$(call kind_field,$(k),2)),$(filter no,$(with_$(k)))),,$(k)))
KINDS_OUT   := $(filter-out $(KINDS),$(KINDS_ALL))
KIND_LIBS   := $(filter-out -,$(foreach k,$(KINDS),$(call kind_field,$(k),3)))
OBJS         = $(patsubst %.c,%.o,$(wildcard src/*.c src/kinds/*.c $(KINDS:%=src/kinds/%/*.c) $(KINDS_OUT:%=src/kinds/%/stub/*.c)))
DATA         = $(wildcard $(EXTENSION)--*.sql)
PG_CPPFLAGS  = -DOUTBOX_VERSION=\"$(EXTVERSION)\" -iquote src $(foreach k,$(KINDS),-DOUTBOX_WITH_$(shell echo $(k) | tr a-z A-Z))
# libcrypto as pgcrypto links it: the one the server was built with
SHLIB_LINK   = $(KIND_LIBS) $(filter -lcrypto, $(LIBS))


# the core's tests, then sql/<kind>.sql of each kind built
REGRESS      = setup emit roles owners security inbox purge relay health rules guc databases upgrade time_zones redeliver ordered fanout route_keys secrets trace_context versions
REGRESS_OPTS = --temp-instance=./tmp_check --temp-config=test/outbox.conf
# a kind left out of the build: its pg_regress test is replaced by one of
# the refusal, and its TAP tests skip themselves (require_kind in
# test/perl/OutboxTest.pm)
REGRESS     := $(REGRESS) $(foreach k,$(KINDS),$(if $(wildcard sql/$(k).sql),$(k))) $(KINDS_OUT:%=left_out_%)
export OUTBOX_KINDS_LEFT_OUT = $(KINDS_OUT)
TAP_TESTS    = 1
PROVE_TESTS  = test/t/*.pl
EXTRA_CLEAN  = tmp_check results log regression.diffs regression.out src/kinds/.built

# initdb refuses to run as root: as root, the test targets hand over to
# ci/check.sh, which runs the same targets as an unprivileged user
# (OUTBOX_TEST_USER, default postgres) on a copy of the tree. REGRESS,
# PROVE_TESTS and TAP_TESTS (empty: no TAP suite) given on the command line
# or in the environment pass through.
ifeq ($(shell id -u),0)
NO_INSTALLCHECK = 1
as_user = PG_CONFIG='$(PG_CONFIG)' \
	$(if $(filter command line environment,$(origin REGRESS)),REGRESS='$(REGRESS)') \
	$(if $(filter command line environment,$(origin PROVE_TESTS)),PROVE_TESTS='$(PROVE_TESTS)') \
	$(if $(filter command line environment,$(origin TAP_TESTS)),TAP_TESTS='$(TAP_TESTS)') \
	bash ci/check.sh
endif

PG_CONFIG   ?= pg_config
PGXS        := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

ifeq ($(filter -lcrypto, $(LIBS)),)
$(error this PostgreSQL was built without OpenSSL, which ed25519 signatures need (configure --with-ssl=openssl))
endif

# PGXS tracks no header dependencies: rebuild everything when one changes,
# or objects would disagree on the layout of shared structs.
$(OBJS): $(wildcard src/*.h src/kinds/*/*.h)

# Which kinds are built is a compile-time macro too: a build with other
# kinds than the last rebuilds every object.
KINDS_STAMP := src/kinds/.built
$(shell echo '$(KINDS)' | cmp -s - $(KINDS_STAMP) || echo '$(KINDS)' > $(KINDS_STAMP))
$(OBJS): $(KINDS_STAMP)

# The release files, from the committed tree (HEAD): the PGXN distribution,
# a zip whose files are under outbox-<version>/ with META.json's version
# (semver, 1.1.0), and the release tarball with the extension's version
# (1.1), which Debian's source package takes as pg-outbox_<version>.orig.tar.gz.
DISTVERSION = $(shell sed -n '0,/"version"/s/.*"version": *"\([^"]*\)".*/\1/p' META.json)
.PHONY: dist
dist:
	git archive --format zip --prefix=$(EXTENSION)-$(DISTVERSION)/ -o $(EXTENSION)-$(DISTVERSION).zip HEAD
	git archive --format tar.gz --prefix=$(EXTENSION)-$(EXTVERSION)/ -o $(EXTENSION)-$(EXTVERSION).tar.gz HEAD

# Run the TAP suite alone (installcheck runs pg_regress, then this).
.PHONY: prove_installcheck
ifeq ($(shell id -u),0)
installcheck:
	$(as_user)
prove_installcheck:
	PG_CONFIG='$(PG_CONFIG)' PROVE_TESTS='$(PROVE_TESTS)' bash ci/check.sh
else
prove_installcheck:
	rm -rf $(CURDIR)/tmp_check
	$(prove_installcheck)
endif
