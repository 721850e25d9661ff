# page: the report page as text.
page() { echo "== Report =="; row apples 3; row pears 4; total 3 4; }
