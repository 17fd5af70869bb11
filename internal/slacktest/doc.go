// Package slacktest is a fake Slack for tests, built from Slack's documented wire formats: the Web API
// methods engrams calls, Socket Mode, and signed Events API requests. Imported only by _test.go files.
package slacktest
