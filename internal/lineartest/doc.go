// Package lineartest is a fake Linear for tests, built from Linear's documented GraphQL and webhook
// formats: issue comments, and signed Issue deliveries. Imported only by _test.go files.
package lineartest
