"""Stand-in for the ``slime`` package in tests (slime is not on PyPI and needs GPUs).

Only the types rollhub-slime touches are here, with the field names, annotations, defaults
and order of slime at the commit recorded in ``../../slime_624b824.json``;
``test_contract.py`` checks them against that record.
"""
