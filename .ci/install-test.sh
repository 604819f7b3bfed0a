#!/usr/bin/env bash
# Proves that a release of this commit can be installed the way a user does it:
#
#   go install github.com/dlock-dev/dlock/cmd/dlock@vX.Y.Z
#
# without a network, and that building the repository leaves every tracked
# file as it was. vX.Y.Z is the version the sub-modules require the root
# module at (RELEASING.md).
#
#  1. Checks every released module's go.mod: no replace or exclude directive
#     (go install refuses them), and every requirement on a module of this
#     repository at vX.Y.Z.
#  2. Clones the commit into a temporary directory and tags it there, as a
#     release would (the checkout itself is never tagged or written to).
#  3. In the clone, in workspace mode (go.work): go mod download, go build and
#     go vet in every module; then git status must show nothing: a build must
#     not change go.work.sum or any other tracked file.
#  4. Builds a file-based module proxy with one version, vX.Y.Z, of every
#     released module (.ci/modzip.go writes the zips).
#  5. For every released module, outside the workspace (GOWORK=off), against
#     that proxy: its go.sum must already hold every checksum its packages and
#     tests need, except those of this repository's own modules (go.work
#     covers them during development). This step fills a scratch module cache
#     from the local one, and from the ordinary module proxy for anything the
#     local cache lacks.
#  6. go install ...@vX.Y.Z with an empty GOPATH and module cache, and a
#     GOPROXY made of two local directories only: the proxy from step 4 and
#     the download cache filled in step 5. No network at all.
#  7. Runs the installed binary: dlock version must print vX.Y.Z, and
#     dlock --help must work.
#
# Usage: bash .ci/install-test.sh   (from anywhere in a checkout; takes a
# minute or less once the module cache is warm). KEEP_INSTALL_TEST=1 keeps
# the temporary directory (clone, proxy, module caches) for a look.
set -euo pipefail

if ! command -v go >/dev/null 2>&1; then
	export PATH="$PATH:/usr/local/go/bin"
fi

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

root_module=github.com/dlock-dev/dlock
# Modules of the repository that are never released (development only).
unreleased="$root_module/bench"

log() { printf 'install-test: %s\n' "$*"; }
fail() {
	printf 'install-test: FAIL: %s\n' "$*" >&2
	exit 1
}

# The version: what cmd/dlock requires the root module at.
version="$(cd cmd/dlock && go mod edit -print | awk -v m="$root_module" '{ sub(/^require[ \t]+/, "") } $1 == m { print $2 }')"
[[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
	fail "cmd/dlock/go.mod requires $root_module at '$version', not at a release version vX.Y.Z"

# Released modules: every module of go.work but the unreleased ones, as
# "module-path<TAB>directory relative to the repository root".
released=()
while read -r path dir; do
	[[ " $unreleased " == *" $path "* ]] && continue
	rel="${dir#"$repo"}"
	rel="${rel#/}"
	released+=("$path"$'\t'"${rel:-.}")
done < <(go list -m -f '{{.Path}} {{.Dir}}')
((${#released[@]} > 1)) || fail "go list -m found no sub-modules (is go.work there?)"

# Prints the tag of a module directory: vX.Y.Z at the root, DIR/vX.Y.Z else.
tag_of() {
	if [[ "$1" == . ]]; then echo "$version"; else echo "$1/$version"; fi
}

# --- 1. go.mod files ---------------------------------------------------------
for entry in "${released[@]}"; do
	path="${entry%%$'\t'*}" dir="${entry#*$'\t'}"
	gomod="$(cd "$dir" && go mod edit -print)"
	if grep -Eq '^(replace|exclude)([[:space:]]|\()' <<<"$gomod"; then
		fail "$dir/go.mod has a replace or exclude directive: go install $path/...@$version would refuse it"
	fi
	while read -r dep depv; do
		[[ -z "$dep" ]] && continue
		[[ "$depv" == "$version" ]] || fail "$dir/go.mod requires $dep $depv, not $version"
	done < <(awk -v m="$root_module" '{ sub(/^require[ \t]+/, "") } $1 == m || index($1, m "/") == 1 { print $1, $2 }' <<<"$gomod")
done
log "version $version; released modules: $(for e in "${released[@]}"; do printf '%s ' "${e#*$'\t'}"; done)"

# --- 2. temporary clone, tagged ----------------------------------------------
work="$(mktemp -d "${TMPDIR:-/tmp}/dlock-install-test.XXXXXX")"
cleanup() {
	if [[ -n "${KEEP_INSTALL_TEST:-}" ]]; then
		log "kept $work"
		return
	fi
	# The module cache marks its files read-only.
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
	log "note: the checkout has uncommitted changes; testing the last commit, $(git rev-parse --short HEAD)"
fi
clone="$work/src"
git init --quiet "$clone"
git -C "$clone" fetch --quiet --no-tags "$repo" HEAD
git -C "$clone" -c advice.detachedHead=false checkout --quiet --detach FETCH_HEAD
for entry in "${released[@]}"; do
	git -C "$clone" tag "$(tag_of "${entry#*$'\t'}")"
done
log "cloned $(git -C "$clone" rev-parse --short HEAD) to $clone; tags: $(git -C "$clone" tag | tr '\n' ' ')"

# --- 3. workspace build leaves the tree clean ----------------------------------
(
	cd "$clone"
	go mod download
	while read -r dir; do
		(cd "$dir" && go mod download && go build ./... && go vet ./...) || fail "workspace build or vet failed in $dir"
	done < <(go list -m -f '{{.Dir}}')
)
changed="$(git -C "$clone" status --porcelain)"
[[ -z "$changed" ]] || fail "building and vetting the modules changed the tree (commit the result, e.g. go.work.sum):
$changed"
log "workspace download, build and vet: tree unchanged"

# --- 4. the module proxy -------------------------------------------------------
proxy="$work/proxy"
tools="$work/tools"
mkdir -p "$proxy" "$tools"
cp "$repo/.ci/modzip.go" "$tools/modzip.go"
(cd "$tools" && GOWORK=off GOFLAGS= go build -o modzip modzip.go) || fail "building .ci/modzip.go"
info_time="$(TZ=UTC git -C "$clone" log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd)"
for entry in "${released[@]}"; do
	path="${entry%%$'\t'*}" dir="${entry#*$'\t'}"
	[[ "$path" == "${path,,}" ]] || fail "$path: upper-case module paths need escaping, which this script does not do"
	tag="$(tag_of "$dir")"
	[[ "$(git -C "$clone" rev-parse "$tag^{commit}")" == "$(git -C "$clone" rev-parse HEAD)" ]] || fail "tag $tag is not at HEAD"
	at="$proxy/$path/@v"
	mkdir -p "$at"
	echo "$version" >"$at/list"
	printf '{"Version":"%s","Time":"%s"}\n' "$version" "$info_time" >"$at/$version.info"
	cp "$clone/$dir/go.mod" "$at/$version.mod"
	"$tools/modzip" -dir "$clone/$dir" -module "$path" -version "$version" -o "$at/$version.zip" >/dev/null
done
log "module proxy with $version of ${#released[@]} modules in $proxy"

# --- 5. each module's go.sum, outside the workspace ------------------------------
cache1="$work/modcache-fill"
local_cache="$(go env GOMODCACHE)/cache/download"
upstream="$(go env GOPROXY)"
case "$upstream" in off | "") upstream=off ;; esac
for entry in "${released[@]}"; do
	dir="${entry#*$'\t'}"
	[[ "$dir" == . ]] && continue # the root module requires nothing of ours
	(
		cd "$clone/$dir"
		# -mod=mod lets the go command add the checksums of this repository's
		# modules, which go.sum does not hold; anything else it adds is a
		# checksum missing from go.sum.
		export GOWORK=off GOFLAGS=-mod=mod GOMODCACHE="$cache1" GOSUMDB=off \
			GOPROXY="file://$proxy,file://$local_cache,$upstream"
		go mod download
		go list -deps -test ./... >/dev/null
	) || fail "$dir: loading its packages outside the workspace failed"
	missing="$(git -C "$clone" diff -U0 -- "$dir/go.sum" | grep -E '^[+-][^+-]' | grep -v "^+$root_module[ /]" || true)"
	[[ -z "$missing" ]] || fail "$dir/go.sum is incomplete or stale outside the workspace; outside go.work it changes by:
$missing"
	git -C "$clone" diff --quiet -- "$dir/go.mod" || fail "$dir/go.mod is not tidy: $(git -C "$clone" diff -- "$dir/go.mod")"
done
log "every sub-module's go.sum is complete but for this repository's modules"

# --- 6. go install, offline -------------------------------------------------------
gopath="$work/gopath"
mkdir -p "$gopath"
(
	cd "$work"
	env GOPATH="$gopath" GOMODCACHE="$gopath/pkg/mod" GOBIN="$work/bin" \
		GOFLAGS=-mod=mod GOWORK=off GOSUMDB=off GONOSUMDB=github.com/dlock-dev GOTOOLCHAIN=local \
		GOPROXY="file://$proxy,file://$cache1/cache/download" \
		go install "$root_module/cmd/dlock@$version"
) || fail "go install $root_module/cmd/dlock@$version"
bin="$work/bin/dlock"
[[ -x "$bin" ]] || fail "go install left no $bin"
log "go install $root_module/cmd/dlock@$version: $bin"

# --- 7. the installed binary runs ---------------------------------------------------
out="$("$bin" version)" || fail "dlock version exited with $?"
[[ "$out" == "dlock $version "* ]] || fail "dlock version printed '$out', expected it to start with 'dlock $version '"
"$bin" --help >/dev/null || fail "dlock --help exited with $?"
log "$out"
log "PASS"
