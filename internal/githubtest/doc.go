// Package githubtest is a fake GitHub for tests, built from GitHub's documented REST and webhook formats:
// pull request reviews and issue comments, and signed webhook deliveries. Imported only by _test.go files.
package githubtest
