#!/bin/sh
# wget for the default root (engrams). Debian's static busybox 1.35 is built
# without wget's timeout support, yet its wget still takes -T and then writes
# through a null pointer: every `wget -T SECS URL` dies with a segfault (exit
# 139). This takes -T SECS, -TSECS, -qT SECS (after -c, -q, -S) and
# --timeout[=]SECS off the arguments and runs busybox's wget under
# `timeout SECS` instead; everything else goes to busybox unchanged.
t=
n=$#
while [ "$n" -gt 0 ]; do
	a=$1
	shift
	n=$((n - 1))
	case $a in
	-T | --timeout)
		if [ "$n" -gt 0 ]; then
			t=$1
			shift
			n=$((n - 1))
		fi
		;;
	--timeout=*) t=${a#--timeout=} ;;
	-T*) t=${a#-T} ;;
	-[cqS]T | -[cqS][cqS]T | -[cqS][cqS][cqS]T)
		if [ "$n" -gt 0 ]; then
			t=$1
			shift
			n=$((n - 1))
		fi
		set -- "$@" "${a%T}"
		;;
	-[cqS]T* | -[cqS][cqS]T* | -[cqS][cqS][cqS]T*)
		set -- "$@" "${a%%T*}"
		t=${a#*T}
		;;
	*) set -- "$@" "$a" ;;
	esac
done
if [ -n "$t" ]; then
	exec /bin/busybox timeout "$t" /bin/busybox wget "$@"
fi
exec /bin/busybox wget "$@"
