//go:build !race

package smtpclient

const rawIO = true
