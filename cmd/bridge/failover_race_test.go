//go:build race

package main

// raceEnabled is set when the tests run with -race: the bridge binary is then built with it too.
const raceEnabled = true
