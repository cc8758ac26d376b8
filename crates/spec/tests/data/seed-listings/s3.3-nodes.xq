for $x in doc("nodes.xml")/NodeA/NodeB/NodeC
return if $x=100
then <out>true</out>
else <out>false</out>
