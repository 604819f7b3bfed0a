#!/usr/bin/env bash
# Ensures the system programs the tests need are installed (Debian).
#
#   redis-server              (package redis-server): the test harness
#                              internal/testenv starts private servers, and
#                              Sentinel as "redis-server --sentinel".
#   redis-cli, redis-benchmark (package redis-tools): debugging, benchmarks.
#   mariadbd, initdb          (packages mariadb-server, postgresql): the
#                              sqllock tests start private servers; always.
#   chromium                  (package chromium): the headless browser that
#                              tests the CLI's dashboard page (cmd/dlock).
#
# When something is missing: as root, installs it with apt-get (running
# apt-get update only if the install fails without it); otherwise prints
# what to install and exits 1.
#
#   ensure-deps.sh          everything the tests need
#   ensure-deps.sh redis    redis-server and redis-tools only (the benchmark)
set -euo pipefail
only=${1:-}

have() {
	command -v "$1" >/dev/null 2>&1 && return 0
	# Daemons live in sbin, which is not always in PATH for non-root users.
	local d
	for d in /usr/sbin /sbin /usr/local/sbin; do
		[[ -x "$d/$1" ]] && return 0
	done
	return 1
}

have_initdb() {
	have initdb && return 0
	compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}

missing=()
have redis-server || missing+=(redis-server)
if ! have redis-cli || ! have redis-benchmark; then
	missing+=(redis-tools)
fi
if [[ "$only" != redis ]]; then
	have chromium || missing+=(chromium)
	have mariadbd || missing+=(mariadb-server)
	have_initdb || missing+=(postgresql)
fi

if ((${#missing[@]} == 0)); then
	echo "deps: ok ($(redis-server --version | cut -d' ' -f1-3))"
	exit 0
fi

echo "deps: missing Debian packages: ${missing[*]}" >&2
if [[ "$(id -u)" != 0 ]]; then
	echo "deps: not root; install them with:" >&2
	echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
install() { apt-get install -y --no-install-recommends "${missing[@]}"; }
if ! install; then
	echo "deps: install failed; running apt-get update and retrying" >&2
	apt-get update
	install
fi
have redis-server || { echo "deps: redis-server still missing after install" >&2; exit 1; }
echo "deps: installed ${missing[*]}"
