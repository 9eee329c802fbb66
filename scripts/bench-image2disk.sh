#!/usr/bin/env bash
# image2disk throughput against the physical baseline (issue 28, "Performance"), on one file
# and one target disk, side by side in one run:
#
#   baseline:   curl -s URL | <decoder> | dd of=TARGET bs=4M oflag=direct
#               (zstd: `zstd -d`, gzip: `gzip -dc`, raw: no decoder)
#   image2disk: IMG_URL=URL DEST_DISK=TARGET tink-actions image2disk   (release build)
#
# Also shown, not part of the target: the same baseline with `iflag=fullblock` (dd otherwise
# writes whatever short read the pipe gives it, often 64 KiB, with O_DIRECT).
#
# The image: a ~1 GiB ext4 file system holding files copied from this machine's /usr (about
# 70% full, the rest never written), so raw, gzip and zstd compress as a real OS image does.
# It is built once and cached in $BENCH_DIR. It is served over loopback HTTP by python3's
# http.server (nginx is used instead when installed). The target is a loop device over a file
# in $BENCH_DIR (direct I/O to the backing file when the kernel allows it), so both writers
# reach the same disk the same way. Each (format, writer) runs $REPS times, alternating the
# order; the median is reported, with MB/s = raw image bytes / wall seconds / 10^6, and the
# ratio image2disk / baseline. The first repetition of each is verified byte for byte against
# the raw image (the target is discarded before it, so stale data cannot pass).
#
# Run as root from the repository: `sudo scripts/bench-image2disk.sh`
#   BENCH_DIR=/var/tmp/tink-bench-image2disk  work directory (image cache, loop backing file)
#   REPS=3                                    repetitions per format and writer
#   IMAGE_MB=1024                             size of the test image
#   TINK_ACTIONS_BIN=...                      a tink-actions binary (default: release build,
#                                             built here with `cargo build --release -p tink-actions`)
#   FORMATS="raw gzip zstd"
# Exits non-zero only on errors (a command failed, a written disk differs from the image).
set -euo pipefail

die() { echo "bench-image2disk: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "must run as root (loop devices, O_DIRECT on a block device)"
for t in curl zstd gzip dd losetup mkfs.ext4 mount umount cmp python3 blkdiscard; do
  command -v "$t" >/dev/null || die "missing tool: $t"
done

repo=$(cd "$(dirname "$0")/.." && pwd)
BENCH_DIR=${BENCH_DIR:-/var/tmp/tink-bench-image2disk}
REPS=${REPS:-3}
IMAGE_MB=${IMAGE_MB:-1024}
FORMATS=${FORMATS:-raw gzip zstd}
mkdir -p "$BENCH_DIR/www"


loop_img="" loop_dev="" server_pid="" mnt=""
cleanup() {
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null || true
  [[ -n $mnt ]] && mountpoint -q "$mnt" && umount "$mnt" || true
  [[ -n $loop_img ]] && losetup -d "$loop_img" 2>/dev/null || true
  [[ -n $loop_dev ]] && losetup -d "$loop_dev" 2>/dev/null || true
  rm -f "$BENCH_DIR/target.img"
}
trap cleanup EXIT

# ---- the test image (cached) ----
raw="$BENCH_DIR/www/image.raw"
if [[ ! -s $raw || $(stat -c %s "$raw") -ne $((IMAGE_MB << 20)) ]]; then
  echo "== building a ${IMAGE_MB} MiB ext4 image with files from /usr"
  rm -f "$raw" "$raw.gz" "$raw.zst"
  truncate -s "${IMAGE_MB}M" "$raw.tmp"
  mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$raw.tmp"
  loop_img=$(losetup -f --show "$raw.tmp")
  mnt=$(mktemp -d)
  mount "$loop_img" "$mnt"
  want=$((IMAGE_MB * 7 / 10))
  mkdir -p "$mnt/usr/share"
  for d in /usr/bin /usr/sbin /usr/share/* /usr/lib/*; do
    used=$(df --output=used -BM "$mnt" | tail -1 | tr -dc 0-9)
    ((used >= want)) && break
    case $d in /usr/share/*) dst="$mnt/usr/share/" ;; /usr/lib/*) mkdir -p "$mnt/usr/lib"; dst="$mnt/usr/lib/" ;; *) dst="$mnt/usr/" ;; esac
    cp -a "$d" "$dst" 2>/dev/null || true   # ENOSPC on the last directory is fine
  done
  df -h "$mnt" | tail -1 | awk '{print "   file system: " $3 " used of " $2}'
  umount "$mnt"; rmdir "$mnt"; mnt=""
  losetup -d "$loop_img"; loop_img=""
  mv "$raw.tmp" "$raw"
fi
if [[ ! -s $raw.gz ]]; then
  echo "== gzip -6"; gzip -6 -c "$raw" >"$raw.gz.tmp" && mv "$raw.gz.tmp" "$raw.gz"
fi
if [[ ! -s $raw.zst ]]; then
  echo "== zstd -3"; zstd -q -3 -T0 -c "$raw" >"$raw.zst.tmp" && mv "$raw.zst.tmp" "$raw.zst"
fi
size=$(stat -c %s "$raw")

bin=${TINK_ACTIONS_BIN:-}
if [[ -z $bin ]]; then
  echo "== cargo build --release -p tink-actions"
  (cd "$repo" && nice -n 10 cargo build --release -q -p tink-actions) || die "release build failed"
  bin="$repo/target/release/tink-actions"
fi
[[ -x $bin ]] || die "not executable: $bin"

# ---- the target: a loop device over a file on disk ----
fs=$(findmnt -n -o SOURCE,FSTYPE -T "$BENCH_DIR" | tr -s ' ' ' ')
truncate -s $(((IMAGE_MB + 64) << 20)) "$BENCH_DIR/target.img"
if loop_dev=$(losetup -f --show --direct-io=on "$BENCH_DIR/target.img" 2>/dev/null) &&
  [[ $(cat "/sys/block/${loop_dev#/dev/}/loop/dio" 2>/dev/null) == 1 ]]; then
  dio="direct I/O to the backing file"
else
  [[ -n $loop_dev ]] && losetup -d "$loop_dev"
  loop_dev=$(losetup -f --show "$BENCH_DIR/target.img")
  dio="buffered I/O to the backing file (the kernel refused direct I/O)"
fi
target=$loop_dev

# ---- the HTTP server on loopback ----
port=$((20000 + RANDOM % 20000))
if command -v nginx >/dev/null; then
  server="nginx"
  conf="$BENCH_DIR/nginx.conf"
  cat >"$conf" <<EOF
daemon off; worker_processes 1; pid $BENCH_DIR/nginx.pid; error_log stderr;
events {}
http { access_log off; sendfile on; server { listen 127.0.0.1:$port; root $BENCH_DIR/www; } }
EOF
  nginx -c "$conf" &
  server_pid=$!
else
  server="python3 -m http.server (nginx is not installed)"
  # The interpreter itself, not a wrapper (pyenv's shim forks), so $! is the server's pid.
  py=$(python3 -c 'import sys; print(sys.executable)')
  "$py" -m http.server --bind 127.0.0.1 --directory "$BENCH_DIR/www" "$port" >/dev/null 2>&1 &
  server_pid=$!
fi
for _ in $(seq 50); do curl -sfI "http://127.0.0.1:$port/image.raw" >/dev/null && break; sleep 0.1; done
curl -sfI "http://127.0.0.1:$port/image.raw" >/dev/null || die "the HTTP server did not start"

# The served files stay in the page cache for every run alike.
cat "$raw" "$raw.gz" "$raw.zst" >/dev/null

echo "== machine"
echo "   cpus $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg) at the start (other work on the machine is not stopped)"
echo "   image $size bytes: raw, gzip $(stat -c %s "$raw.gz"), zstd $(stat -c %s "$raw.zst")"
echo "   target $target: loop over $BENCH_DIR/target.img on $fs, $dio"
echo "   server $server on 127.0.0.1:$port; tink-actions $("$bin" --version 2>/dev/null || echo "$bin")"

file_of() { case $1 in raw) echo image.raw ;; gzip) echo image.raw.gz ;; zstd) echo image.raw.zst ;; esac; }
decoder() { case $1 in raw) cat ;; gzip) gzip -dc ;; zstd) zstd -dc ;; esac; }

# write WRITER FORMAT: writes the image once.
write() {
  local writer=$1 fmt=$2 url
  url="http://127.0.0.1:$port/$(file_of "$fmt")"
  case $writer in
    baseline)
      if [[ $fmt == raw ]]; then
        curl -sf "$url" | dd of="$target" bs=4M oflag=direct status=none
      else
        curl -sf "$url" | decoder "$fmt" | dd of="$target" bs=4M oflag=direct status=none
      fi ;;
    fullblock)
      if [[ $fmt == raw ]]; then
        curl -sf "$url" | dd of="$target" bs=4M iflag=fullblock oflag=direct status=none
      else
        curl -sf "$url" | decoder "$fmt" | dd of="$target" bs=4M iflag=fullblock oflag=direct status=none
      fi ;;
    image2disk)
      local compressed=true; [[ $fmt == raw ]] && compressed=false
      IMG_URL=$url DEST_DISK=$target COMPRESSED=$compressed TEXT_LOGGING=true \
        PROGRESS_INTERVAL_SECONDS=3600 "$bin" image2disk >"$BENCH_DIR/image2disk.log" 2>&1 ||
        { cat "$BENCH_DIR/image2disk.log" >&2; return 1; } ;;
  esac
}

# run WRITER FORMAT: prints "WALL CPU" seconds, CPU being user + system time of every process
# of the writer (curl, decoder, dd; or tink-actions), not of the HTTP server. CPU time is far
# less disturbed by other work on the machine than wall time.
run() {
  local out err="$BENCH_DIR/write.err"
  out=$({ TIMEFORMAT='%R %U %S'; time write "$1" "$2" 2>"$err"; } 2>&1) || { cat "$err" >&2; return 1; }
  echo "$out" | tail -1 | awk '{printf "%.3f %.3f", $1, $2 + $3}'
}

verify() {
  cmp -n "$size" "$raw" "$target" >/dev/null || die "$1 $2: the target differs from the image"
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
mbps() { awk -v b="$size" -v s="$1" 'BEGIN {printf "%.1f", b / s / 1e6}'; }
per_gb() { awk -v b="$size" -v s="$1" 'BEGIN {printf "%.2f", s / (b / 1e9)}'; }

writers="baseline image2disk fullblock"
declare -A wall cpu
for fmt in $FORMATS; do
  for rep in $(seq "$REPS"); do
    # Alternate which writer goes first, so a drift in the machine's load hits both.
    order=$writers
    ((rep % 2 == 0)) && order="image2disk baseline fullblock"
    for w in $order; do
      if ((rep == 1)); then
        # Verified run: the target is emptied first, so stale data cannot pass.
        blkdiscard "$target" 2>/dev/null ||
          dd if=/dev/zero of="$target" bs=4M oflag=direct status=none count=$(((IMAGE_MB + 63) / 4))
      fi
      r=$(run "$w" "$fmt") || die "$w $fmt failed"
      ((rep == 1)) && verify "$w" "$fmt"
      read -r s c <<<"$r"
      wall[$fmt.$w]+="$s "
      cpu[$fmt.$w]+="$c "
      printf '   %-5s rep %d %-10s %7.2f s %7s MB/s  cpu %6.2f s\n' "$fmt" "$rep" "$w" "$s" "$(mbps "$s")" "$c"
    done
  done
done

echo "== results (median of $REPS; MB/s of the raw image, 10^6 bytes/s; CPU s per GB written)"
printf '%-6s %14s %16s %8s %-8s %18s %18s %16s\n' format "baseline MB/s" "image2disk MB/s" ratio target \
  "CPU s/GB baseline" "CPU s/GB image2disk" "fullblock MB/s"
for fmt in $FORMATS; do
  b=$(echo "${wall[$fmt.baseline]}" | median)
  i=$(echo "${wall[$fmt.image2disk]}" | median)
  f=$(echo "${wall[$fmt.fullblock]}" | median)
  cb=$(echo "${cpu[$fmt.baseline]}" | median)
  ci=$(echo "${cpu[$fmt.image2disk]}" | median)
  ratio=$(awk -v b="$b" -v i="$i" 'BEGIN {printf "%.2f", b / i}')
  met=$(awk -v r="$ratio" 'BEGIN {print (r >= 0.9) ? "met" : "NOT met"}')
  printf '%-6s %14s %16s %7sx %-8s %18s %18s %16s\n' "$fmt" "$(mbps "$b")" "$(mbps "$i")" "$ratio" "$met" \
    "$(per_gb "$cb")" "$(per_gb "$ci")" "$(mbps "$f")"
done
echo "   load $(cut -d' ' -f1-3 /proc/loadavg) at the end"
