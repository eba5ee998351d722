from dispatch.web.serve import main

main()
