#!/bin/sh
# agent.sh: a ZMailer transport agent in plain POSIX shell (sh, awk, dd,
# printf), to show that a hand-written agent needs no library. It speaks
# the protocol of zmailer-facts.md §2: "#hungry" before every read; a job
# line "path<TAB>host" (or "path" with the host from argv); it locks the
# pending r lines of its channel and host ("~" + its PID in 6 columns),
# delivers them by marking "+" (PID columns blanked) and reports "ok3".
# A missing message body is a permanent "error" (the scheduler writes the
# d line); a file it cannot use gets "#resync path"; unknown format flags
# end the agent, as ZMailer's agents do. An empty line or EOF ends it; a
# partial last line is dropped.
#
# usage: agent.sh -c channel [host]

set -u
LC_ALL=C
export LC_ALL

me=agent.sh
channel=
while getopts c: opt; do
	case $opt in
	c) channel=$OPTARG ;;
	*) printf '# %s: usage: %s -c channel [host]\n' "$me" "$me" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
defhost=${1:-}
if [ -z "$channel" ]; then
	printf '# %s: -c channel is required\n' "$me" >&2
	exit 2
fi
tab=$(printf '\t')

# poke FILE OFFSET BYTES: overwrite bytes in place, as ZMailer's agents
# write the status byte and PID columns.
poke() {
	printf '%s' "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}

# peek FILE OFFSET: print one byte, bracketed so a blank survives $(...).
peek() {
	printf '[%s]' "$(dd if="$1" bs=1 skip="$2" count=1 2>/dev/null)"
}

job() {
	file=$1
	host=$2
	if [ ! -f "$file" ] || [ ! -r "$file" ] || [ ! -w "$file" ]; then
		printf '# %s: cannot open control file "%s"\n' "$me" "$file"
		printf '#resync %s\n' "$file"
		return
	fi
	fmt=$(sed -n '/^@/{s/^@ *//p;q;}' "$file")
	case $fmt in
	0x[0-9a-fA-F]* | [0-9]*) flags=$((fmt)) ;;
	*) flags=0 ;;
	esac
	if [ $((flags & ~7)) -ne 0 ]; then
		printf '# %s: unsupported format flags %s in "%s"\n' "$me" "$fmt" "$file"
		printf '#resync %s\n' "$file"
		exit 1
	fi
	pidw=0
	lock='~'
	blank=
	if [ $((flags & 1)) -ne 0 ]; then
		pidw=6
		lock=$(printf '~%6d' $$)
		blank='      '
	fi
	delayw=0
	[ $((flags & 2)) -ne 0 ] && delayw=4

	# One line "i <id>", then the offset of every pending r line of our
	# channel and host. Offsets count bytes (LC_ALL=C); m/M blocks, which
	# run to a blank line, are skipped so header lines are never taken
	# for r lines.
	info=$(awk -v ch="$channel" -v host="$host" -v skip=$((pidw + delayw)) '
		BEGIN { host = tolower(host) }
		{
			n = length($0) + 1
			if (inblock) { if ($0 == "") inblock = 0 }
			else if ($0 == "m" || $0 == "M") inblock = 1
			else if (substr($0, 1, 2) == "i ") print "i", substr($0, 3)
			else if (substr($0, 1, 2) == "r ") {
				split(substr($0, 3 + skip), f, " ")
				h = f[2]
				if (substr(h, 1, 1) == "(") { sub(/^\(+/, "", h); sub(/[) ].*/, "", h) }
				if (f[1] == ch && (host == "" || tolower(h) == host)) print off
			}
			off += n
		}' "$file")
	id=
	offs=
	for w in $info; do
		if [ "$w" = i ]; then
			id=next
		elif [ "$id" = next ]; then
			id=$w
		else
			offs="$offs $w"
		fi
	done

	locked=
	for off in $offs; do
		if [ "$(peek "$file" $((off + 1)))" = '[ ]' ]; then
			poke "$file" $((off + 1)) "$lock"
			locked="$locked $off"
		fi
	done
	if [ -z "$locked" ]; then
		printf '#resync %s\n' "$file"
		return
	fi

	base=${file##*/}
	inum=${base%%[!0-9]*}
	case $file in
	*/*) body=../queue/${file%/*}/$id ;;
	*) body=../queue/$id ;;
	esac
	if [ -z "$id" ] || [ ! -e "$body" ]; then
		for off in $locked; do
			poke "$file" $((off + 1)) "-$blank"
			printf '%s/%s\t\terror message file is missing\n' "$inum" "$off"
		done
		printf '# %s: cannot open message file "%s"\n' "$me" "$body"
		printf '#resync %s\n' "$file"
		return
	fi
	# Delivering is reading the message, after the locks (ta-check's lock case).
	if ! cat "$body" >/dev/null; then
		for off in $locked; do
			poke "$file" $((off + 1)) " $blank"
			printf '%s/%s\t\tdeferred cannot read the message file\n' "$inum" "$off"
		done
		return
	fi
	for off in $locked; do
		poke "$file" $((off + 1)) "+$blank"
		printf '%s/%s\t\tok3 delivered by %s\n' "$inum" "$off" "$me"
	done
}

while :; do
	printf '#hungry\n'
	# read fails at EOF, also on a partial last line: that is dropped.
	IFS= read -r line || exit 0
	case $line in
	'') exit 0 ;;
	'#'*) continue ;;
	*"$tab"*) job "${line%%"$tab"*}" "${line#*"$tab"}" ;;
	*) job "$line" "$defhost" ;;
	esac
done
