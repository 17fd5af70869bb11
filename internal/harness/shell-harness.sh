#!/bin/sh
# engrams shell harness (protocol "shell"): the smallest harness, for tests.
# Each line read on stdin is a prompt, run as a shell command in the working
# directory (stdin /dev/null, stderr merged into stdout). Every line written
# on stdout is one JSON event:
#   {"type":"ready","harness":"shell","version":"1"}   once, at start
#   {"type":"prompt","text":"<the prompt>"}           a prompt was received
#   {"type":"output","text":"<one line of output>"}   streamed as produced
#   {"type":"result","exit_code":<n>}                 the command ended
#   {"type":"idle"}                                   waiting for a prompt
#   {"type":"exit"}                                   end of input; exits 0
# Empty lines are ignored. Text is escaped for JSON (backslash, quote, tab,
# carriage return; other control characters are dropped). Needs sh, sed, tr.
tab=$(printf '\t')
cr=$(printf '\r')

esc() {
	printf '%s\n' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e "s/$tab/\\\\t/g" -e "s/$cr/\\\\r/g" |
		tr -d '\000-\010\013-\037'
}

output() {
	while IFS= read -r line || [ -n "$line" ]; do
		printf '{"type":"output","text":"%s"}\n' "$(esc "$line")"
	done
}

printf '{"type":"ready","harness":"shell","version":"1"}\n'
while IFS= read -r prompt || [ -n "$prompt" ]; do
	[ -n "$prompt" ] || continue
	printf '{"type":"prompt","text":"%s"}\n' "$(esc "$prompt")"
	code=$({ { sh -c "$prompt" </dev/null 2>&1 3>&- 4>&-; echo "$?" >&4; } | output >&3; } 4>&1)
	printf '{"type":"result","exit_code":%s}\n' "${code:-1}"
	printf '{"type":"idle"}\n'
done 3>&1
printf '{"type":"exit"}\n'
