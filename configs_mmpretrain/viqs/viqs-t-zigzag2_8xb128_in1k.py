# ViQS-T with a fixed scan set instead of the Switch of Scans: Table 12 row of the MambaMixer paper
# (arXiv 2403.19888 v2, App. I.1): "Zigzag (2)" (1171 img/s, 81.3 top-1; SoS: 1172 img/s, 81.7). Every image is scanned
# by Z1, Z5 (row and column snakes), each scan run bidirectionally, the outputs summed (SCAN_SETS in
# ssm_plugins/layers/switch_of_scans.py; which scans make each set is [D], docs/mambamixer.md 'Switch of Scans').
# "Cross-Scan (4)" is Table 4's "w/o SoS": viqs-t-nosos_8xb128_in1k.py.
_base_ = ['./viqs-t_8xb128_in1k.py']

model = dict(fixed_scans='zigzag2')
