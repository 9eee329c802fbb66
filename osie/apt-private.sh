# shellcheck shell=bash
# Sourced by osie/build.sh (NIC firmware, non-free-firmware) and osie/ipxe-arm64.sh (trixie's
# ipxe): apt over one Debian suite and component, with its own sources list, package lists and
# downloads under a folder of ours, checked with Debian's archive keyring. The host's apt
# configuration is neither read for sources nor changed.

# apt_private DIR SUITE COMPONENT: prepares DIR and sets apt_opts, the options that make
# apt-get and apt-cache use it. Fails, saying why, without Debian's archive keyring.
apt_private() {
  local dir=$1 suite=$2 component=$3 keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -f "$keyring" ] || { echo "no $keyring (Debian's debian-archive-keyring) to check $suite $component's packages with" >&2; return 1; }
  mkdir -p "$dir/lists/partial" "$dir/archives/partial" "$dir/parts"
  echo "deb [signed-by=$keyring] http://deb.debian.org/debian $suite $component" > "$dir/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$dir/sources.list" -o "Dir::Etc::SourceParts=$dir/parts"
    -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir" -o Debug::NoLocking=1)
}
