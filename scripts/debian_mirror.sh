#!/usr/bin/env bash
# Print the Debian mirror this host's apt already uses, for debootstrap and image builds, so no
# mirror host is written into the project: the first enabled `deb` source whose suite is a Debian
# release (bookworm, bullseye, stable, ...: not -security / -updates / a third-party suite), read
# from one-line (.list) and deb822 (.sources) files.
#   scripts/debian_mirror.sh [SOURCES_FILE ...]
# Default files: /etc/apt/sources.list, /etc/apt/sources.list.d/*.list and *.sources.
# CNNVIDEO_DEBIAN_MIRROR, when set, wins. Exit 1 (with the reason) when no Debian source is found:
# then set CNNVIDEO_DEBIAN_MIRROR, or let debootstrap use its own default mirror.
# Sourced (`. scripts/debian_mirror.sh`), it only defines debian_mirror [FILE ...].
set -euo pipefail

debian_mirror() {
  if [ -n "${CNNVIDEO_DEBIAN_MIRROR:-}" ]; then echo "${CNNVIDEO_DEBIAN_MIRROR%/}"; return 0; fi
  local files=("$@") f
  if [ ${#files[@]} = 0 ]; then
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
      [ -f "$f" ] && files+=("$f")
    done
  fi
  local mirror="" suites='^(buster|bullseye|bookworm|trixie|forky|duke|sid|oldoldstable|oldstable|stable|testing|unstable)$'
  for f in "${files[@]}"; do
    [ -r "$f" ] || continue
    case $f in
      *.sources) mirror=$(awk -v suites="$suites" -f - "$f" <<'AWK'
# deb822: stanzas separated by blank lines; fields Types, URIs, Suites, Enabled (continuation
# lines start with a space); comments start with #
function flush() {
  if (types ~ /(^| )deb( |$)/ && enabled !~ /^(no|false)$/ && uris != "") {
    n = split(suite_list, s, " ")
    for (i = 1; i <= n; i++) if (s[i] ~ suites) { split(uris, u, " "); print u[1]; found = 1; exit }
  }
  types = ""; uris = ""; suite_list = ""; enabled = ""; last = ""
}
/^[ \t]*#/ { next }
/^[ \t]*$/ { flush(); next }
/^[ \t]/ { if (last == "uris") uris = uris " " $0; else if (last == "suites") suite_list = suite_list " " $0; next }
{
  key = tolower($0); sub(/:.*/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val)
  last = key
  if (key == "types") types = val; else if (key == "uris") uris = val
  else if (key == "suites") suite_list = val; else if (key == "enabled") enabled = tolower(val)
}
END { if (!found) flush() }
AWK
) ;;
      *) mirror=$(awk -v suites="$suites" '
# one-line: deb [options] URI SUITE COMPONENT...
{ sub(/#.*/, "") }
$1 != "deb" { next }
{
  line = $0; sub(/^[ \t]*deb[ \t]+/, "", line)
  if (line ~ /^\[/) sub(/^\[[^]]*\][ \t]*/, "", line)
  split(line, w, /[ \t]+/)
  if (w[2] ~ suites) { print w[1]; exit }
}' "$f") ;;
    esac
    if [ -n "$mirror" ]; then echo "${mirror%/}"; return 0; fi
  done
  echo "debian_mirror: no Debian release source in ${files[*]:-the apt sources}; set CNNVIDEO_DEBIAN_MIRROR=URL" >&2
  return 1
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then debian_mirror "$@"; fi
