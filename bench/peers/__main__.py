from bench.peers.cli import main

main()
