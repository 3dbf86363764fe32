"""placeholder"""
def add_parser(sub): pass
def main(args): return 0
