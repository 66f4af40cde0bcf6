# Conveyor: `make run` serves the app on http://127.0.0.1:3000, `make test` is what CI runs.
# A project-local PostgreSQL 15 (.ci/pg.sh, Unix socket only) is used unless DATABASE_URL is set.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.ONESHELL:

PG_DIR ?= $(CURDIR)/.pg
TEST_PG_DIR ?= $(CURDIR)/target/test-pg
BENCH_PG_DIR ?= $(CURDIR)/target/bench-pg
PG := $(CURDIR)/.ci/pg.sh
# cargo-leptos, wasm-bindgen (cargo install) and wasm-opt (npm binaryen) live here.
export PATH := $(HOME)/.cargo/bin:$(CURDIR)/end2end/node_modules/.bin:$(PATH)

.PHONY: tools db run cluster test e2e bench fuzz fmt clean-db sqlx

tools:
	bash .ci/tools.sh

db:
	if [ -z "$${DATABASE_URL:-}" ]; then "$(PG)" start "$(PG_DIR)" conveyor; fi

run: tools db
	export DATABASE_URL="$${DATABASE_URL:-$$("$(PG)" url "$(PG_DIR)" conveyor)}"
	cargo leptos serve

# Many processes on one database, as production runs them: two servers without workers
# (http://127.0.0.1:3000 and http://127.0.0.1:3001) and WORKERS=… (default 3) `server worker`
# processes, from the release build. Ctrl-C stops them all.
WORKERS ?= 3
cluster: tools db
	cargo leptos build --release
	export DATABASE_URL="$${DATABASE_URL:-$$("$(PG)" url "$(PG_DIR)" conveyor)}"
	trap 'kill $$(jobs -p) 2>/dev/null || true; wait' EXIT
	for port in 3000 3001; do
	  CONVEYOR_NO_WORKERS=1 LEPTOS_SITE_ADDR="127.0.0.1:$$port" target/release/server serve &
	done
	for n in $$(seq $(WORKERS)); do target/release/server worker & done
	# Until one of them stops (a busy port, say): then the trap stops the others.
	wait -n

# $(call e2e,PROFILE,FLAGS,ARGS): builds the site (FLAGS go to `cargo leptos build`), then runs
# Playwright, which starts target/PROFILE/server itself for each spec file, on a free port with
# a fresh database in the test cluster ($CONVEYOR_TEST_DATABASE_URL), and drops it afterwards
# (end2end/tests/app.ts). The servers run no workers: the tests start `server worker`
# themselves. ARGS go to Playwright.
define e2e
cargo leptos build $(2)
CONVEYOR_SERVER_BIN="$(CURDIR)/target/$(1)/server" \
  playwright test --config end2end/playwright.config.ts $(3)
endef

# `.sqlx/` holds what `sqlx::query!` checks each query against (builds are offline:
# .cargo/config.toml). After changing a query or a migration, `make sqlx` writes it again from a
# database migrated afresh (ours and apalis's migrations); `make test` fails while it is stale.
APALIS_DIR_PY := import json, sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "apalis-postgres").rsplit("/", 1)[0])
define sqlx_prepare
"$(PG)" recreate "$(TEST_PG_DIR)" conveyor_sqlx
DATABASE_URL="$$("$(PG)" url "$(TEST_PG_DIR)" conveyor_sqlx)"; export DATABASE_URL
# apalis's own tables first, as the server makes them (store::queue reads them, and our
# migrations adapt them), from the pinned crate's source. They are recorded beside ours here
# (the server keeps them apart), hence --ignore-missing.
apalis="$$(cargo metadata --format-version 1 --locked | python3 -c '$(APALIS_DIR_PY)')"
cargo sqlx migrate run --source "$$apalis/migrations"
cargo sqlx migrate run --source migrations --ignore-missing
cargo sqlx prepare --workspace $(1) -- --all-targets
endef

sqlx: tools
	PG_FAST=1 "$(PG)" start "$(TEST_PG_DIR)"
	$(call sqlx_prepare,)

test: tools
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p app --lib --target wasm32-unknown-unknown --no-default-features \
	  --features hydrate -- -D warnings
	# A throwaway cluster, stopped however the steps below end.
	"$(PG)" stop "$(TEST_PG_DIR)"
	rm -rf "$(TEST_PG_DIR)"
	trap 'exit 130' INT TERM
	trap '"$(PG)" stop "$(TEST_PG_DIR)"' EXIT
	PG_FAST=1 "$(PG)" start "$(TEST_PG_DIR)"
	$(call sqlx_prepare,--check)
	export CONVEYOR_TEST_DATABASE_URL="$$("$(PG)" url "$(TEST_PG_DIR)" postgres)"
	cargo test --workspace
	# Playwright against what users get, the release frontend (optimised by wasm-opt), served
	# by the debug server `cargo test` just built for the integration tests: a release server
	# build took 11 of the 27 minutes this target used to take.
	$(call e2e,debug,--release --frontend-only)

# Playwright alone against the test cluster (started if need be, and left running):
# `make e2e`, `make e2e RELEASE=1`, `make e2e SPEC=import` (spec files whose name has it).
e2e: tools
	PG_FAST=1 "$(PG)" start "$(TEST_PG_DIR)"
	export CONVEYOR_TEST_DATABASE_URL="$$("$(PG)" url "$(TEST_PG_DIR)" postgres)"
	$(call e2e,$(if $(RELEASE),release,debug),$(if $(RELEASE),--release),$(SPEC))

# Import/export speed against raw COPY on this machine; ROWS=… (default 1,000,000) and
# XLSX_ROWS=… (default 200,000) change the file sizes, ONLY=csv|export|xlsx|kill|hostile|preview|delete|items|reads|small|topology|fanout|admin|xml
# runs one part. The small part runs 10,000 imports of 100 rows (JOBS=…) and another owner's one. The export part times CSV export (created -> downloaded) against `\copy … to`, then XLSX export against it. The reads part loads GET /api/jobs/{id} against /healthz. The items part runs 100,000 no-op items of a job type through 4 external workers. The
# topology part runs imports through two servers with 1, then 3 worker processes. The fanout part
# has WATCHERS=… (default 500,2000,10000) browsers follow one running import's events. The admin part seeds JOBS=… (default 10,000,000) jobs and times the job list, then a retention round over them. The xml part (last; no database, no server) times our XLSX XML tokenizer against
# quick-xml, each reading a workbook made like the XLSX part's (spreadsheet::xlsx::measure).
XML_BENCH := cargo test --release -p server --lib spreadsheet::xlsx::measure -- --ignored --nocapture

bench: $(if $(filter xml,$(ONLY)),,tools)
	if [ "$(ONLY)" = xml ]; then XLSX_ROWS="$(XLSX_ROWS)" $(XML_BENCH); exit; fi
	cargo leptos build --release
	trap '"$(PG)" stop "$(BENCH_PG_DIR)"' EXIT
	"$(PG)" start "$(BENCH_PG_DIR)"
	"$(PG)" recreate "$(BENCH_PG_DIR)" conveyor_bench
	if [ "$(ONLY)" != admin ] && [ "$(ONLY)" != items ] && [ "$(ONLY)" != fanout ] && [ "$(ONLY)" != topology ] && [ "$(ONLY)" != reads ] && [ "$(ONLY)" != small ]; then python3 server/benches/imports.py \
	  --server "$(CURDIR)/target/release/server" \
	  --db-url "$$("$(PG)" url "$(BENCH_PG_DIR)" conveyor_bench)" --dir "$(CURDIR)/target/bench" \
	  $(if $(ROWS),--rows $(ROWS)) $(if $(XLSX_ROWS),--xlsx-rows $(XLSX_ROWS)) $(if $(ONLY),--only $(ONLY)); fi
	if [ -z "$(ONLY)" ] || [ "$(ONLY)" = items ]; then \
	  cargo build --release -p server --example small_imports && python3 server/benches/items.py \
	  --server "$(CURDIR)/target/release/server" \
	  --imports-bin "$(CURDIR)/target/release/examples/small_imports" \
	  --db-url "$$("$(PG)" url "$(BENCH_PG_DIR)" conveyor_bench)"; fi
	if [ -z "$(ONLY)" ] || [ "$(ONLY)" = admin ]; then \
	  cargo build --release -p server --example retention_round && python3 server/benches/console.py \
	  --server "$(CURDIR)/target/release/server" \
	  --retention-bin "$(CURDIR)/target/release/examples/retention_round" \
	  --db-url "$$("$(PG)" url "$(BENCH_PG_DIR)" conveyor_bench)" --pg-log "$(BENCH_PG_DIR)/log" \
	  --dir "$(CURDIR)/target/bench" \
	  $(if $(JOBS),--jobs $(JOBS)); fi
	if [ -z "$(ONLY)" ] || [ "$(ONLY)" = reads ]; then \
	  cargo build --release -p server --example load && python3 server/benches/reads.py \
	  --server "$(CURDIR)/target/release/server" \
	  --load-bin "$(CURDIR)/target/release/examples/load" \
	  --db-url "$$("$(PG)" url "$(BENCH_PG_DIR)" conveyor_bench)" --dir "$(CURDIR)/target/bench"; fi
	# The small part has a database of its own: its retention figure works off all it finds due.
	if [ -z "$(ONLY)" ] || [ "$(ONLY)" = small ]; then \
	  cargo build --release -p server --example small_imports --example retention_round && \
	  "$(PG)" recreate "$(BENCH_PG_DIR)" conveyor_small && python3 server/benches/small.py \
	  --server "$(CURDIR)/target/release/server" \
	  --imports-bin "$(CURDIR)/target/release/examples/small_imports" \
	  --retention-bin "$(CURDIR)/target/release/examples/retention_round" \
	  --db-url "$$("$(PG)" url "$(BENCH_PG_DIR)" conveyor_small)" $(if $(JOBS),--jobs $(JOBS)); fi
	if [ -z "$(ONLY)" ] || [ "$(ONLY)" = topology ]; then python3 server/benches/topology.py \
	  --server "$(CURDIR)/target/release/server" \
	  --db-url "$$("$(PG)" url "$(BENCH_PG_DIR)" conveyor_bench)" --dir "$(CURDIR)/target/bench"; fi
	if [ -z "$(ONLY)" ] || [ "$(ONLY)" = fanout ]; then \
	  cargo build --release -p server --example watchers && python3 server/benches/fanout.py \
	  --server "$(CURDIR)/target/release/server" \
	  --watchers-bin "$(CURDIR)/target/release/examples/watchers" \
	  --db-url "$$("$(PG)" url "$(BENCH_PG_DIR)" conveyor_bench)" --dir "$(CURDIR)/target/bench" \
	  $(if $(WATCHERS),--watchers $(WATCHERS)); fi
	if [ -z "$(ONLY)" ]; then XLSX_ROWS="$(XLSX_ROWS)" $(XML_BENCH); fi

# Fuzzes the XLSX reader's XML tokenizer with libFuzzer for FUZZ_SECONDS (default 300), starting
# from the checked-in seeds (server/tests/fixtures/xlsx-seeds/); a crash lands in
# server/fuzz/artifacts/. A single allocation past 4 MB fails it (the target's token cap is
# 1 MB). Needs the nightly toolchain; installs cargo-fuzz when missing.
FUZZ_VERSION := 0.13.2
fuzz:
	if [ "$$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $(FUZZ_VERSION)" ]; then
	  cargo install cargo-fuzz --version $(FUZZ_VERSION) --locked
	fi
	mkdir -p server/fuzz/corpus/xml_tokenizer
	cd server/fuzz && cargo +nightly fuzz run xml_tokenizer corpus/xml_tokenizer \
	  ../tests/fixtures/xlsx-seeds -- -max_total_time=$(or $(FUZZ_SECONDS),300) \
	  -malloc_limit_mb=4 -rss_limit_mb=1024

fmt:
	cargo fmt --all

clean-db:
	"$(PG)" stop "$(PG_DIR)"
	rm -rf "$(PG_DIR)"
