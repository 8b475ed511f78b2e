#!/bin/sh
# pidkept.sh: a transport agent in plain POSIX shell that breaks one rule of
# the zsched TA protocol on purpose, so that ta-check has a hand-written
# agent to catch: when it marks a recipient '+' or '-' it rewrites only the
# status byte and leaves its PID in the PID columns (the rule: blank them;
# docs/ta-protocol.md §7). Everything else it does by the book: #hungry
# before every read, locks with '~' and its PID, reads the body after
# locking, one report per recipient, #resync for a job it cannot use, exit
# on unknown format flags, on an empty line and at EOF.
#
# usage: pidkept.sh -c channel [host]

set -u
LC_ALL=C
export LC_ALL

if [ "${1:-}" != -c ] || [ -z "${2:-}" ]; then
	printf '# pidkept.sh: usage: pidkept.sh -c channel [host]\n'
	exit 2
fi
channel=$2
defhost=${3:-}
tab=$(printf '\t')

# put FILE OFFSET BYTES overwrites bytes in place.
put() {
	printf '%s' "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}

job() {
	f=$1
	host=$2
	if [ ! -f "$f" ]; then
		printf '#resync %s\n' "$f"
		return
	fi
	# Only the layout ZMailer's router writes is known here.
	if [ "$(sed -n '1p' "$f")" != '@ 0x00000007' ]; then
		printf '# pidkept.sh: unknown format in %s\n#resync %s\n' "$f" "$f"
		exit 1
	fi
	id=$(sed -n 's/^i //p' "$f" | sed -n 1p)
	# Offsets of the pending r lines of our channel and host; m blocks
	# (headers up to a blank line) are skipped.
	offs=$(awk -v ch="$channel" -v h="$host" '
		{ n = length($0) + 1 }
		blk { if ($0 == "") blk = 0; off += n; next }
		$0 == "m" { blk = 1 }
		substr($0, 1, 2) == "r " {
			split(substr($0, 13), w, " ")
			if (w[1] == ch && (h == "" || tolower(w[2]) == tolower(h))) print off
		}
		{ off += n }' "$f")
	locked=
	for o in $offs; do
		put "$f" $((o + 1)) "$(printf '~%6d' $$)"
		locked="$locked $o"
	done
	if [ -z "$locked" ]; then
		printf '#resync %s\n' "$f"
		return
	fi
	base=${f##*/}
	case $f in
	*/*) body=../queue/${f%/*}/$id ;;
	*) body=../queue/$id ;;
	esac
	if [ ! -e "$body" ]; then
		for o in $locked; do
			put "$f" $((o + 1)) -
			printf '%s/%s\t\terror message file is missing\n' "$base" "$o"
		done
		printf '#resync %s\n' "$f"
		return
	fi
	cat "$body" >/dev/null
	for o in $locked; do
		put "$f" $((o + 1)) +
		printf '%s/%s\t\tok3 delivered\n' "$base" "$o"
	done
}

while :; do
	printf '#hungry\n'
	IFS= read -r line || exit 0
	case $line in
	'') exit 0 ;;
	'#'*) continue ;;
	*"$tab"*) job "${line%%"$tab"*}" "${line#*"$tab"}" ;;
	*) job "$line" "$defhost" ;;
	esac
done
