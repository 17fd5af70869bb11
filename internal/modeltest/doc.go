// Package modeltest serves scripted Anthropic Messages and OpenAI Responses APIs on 127.0.0.1
// and finds or installs the real claude and codex CLIs, so tests can drive real agents
// offline. It is imported only from _test.go files.
package modeltest
