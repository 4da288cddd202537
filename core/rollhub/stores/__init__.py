"""Result stores: where agents write their results and the client reads them."""
