//go:build tools

// Package tools pins the S3-API server `kb services start` builds for tests: versitygw (Apache-2.0) with
// its posix backend. Nothing here is compiled into anything; services.py runs
//
//	go build -o <state>/services/bin/versitygw github.com/versity/versitygw/cmd/versitygw
//
// in this module, so go.mod/go.sum fix the version and every dependency's checksum.
package tools
